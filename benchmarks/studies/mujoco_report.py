"""`python benchmarks/studies/mujoco_peer.py --report`: per task and algorithm, our `--suite mujoco` record beside
sbx's (benchmarks/studies/mujoco_peer.py's records) and the published figure, our policies' returns replayed on
Gymnasium's env (replay_on_gymnasium.py's records), and the learning curves, a panel per task with every algorithm
on it; every row read from a committed record that names its commit, command and machine."""

import json
import os

import numpy as np

from benchmarks.suite.entries import SCRIPT_ALGO
from benchmarks.suite.suites import SUITES
from scanrl.harness import aggregate
from scanrl.harness.files import replaced

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OURS = os.path.join(ROOT, "benchmarks", "results", "records", "mujoco")
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def load(path):
    with open(path) as f:
        return json.load(f)


def load_peer(peer_records, name):
    """sbx's record `name`.json pooled with its other sittings' (`name`.2.json, ...: other seeds, same recipe): their
    seeds, evaluations and curves together, the IQM over all of them, the wall-clock summed; None where none ran."""
    sittings = [load(os.path.join(peer_records, f)) for f in sorted(os.listdir(peer_records))
                if f == f"{name}.json" or f.startswith(f"{name}.") and f.removeprefix(f"{name}.")[:-5].isdigit()]
    if not sittings:
        return None
    pooled, seeds = json.loads(json.dumps(sittings[0])), [s for r in sittings for s in r["summary"]["seeds"]]
    recipe = [{k: v for k, v in r["config"].items() if k != "parallel"} for r in sittings]  # seeds at a time may differ
    if len(set(seeds)) < len(seeds) or any(r != recipe[0] for r in recipe):
        raise SystemExit(f"error: the records {name}*.json share seeds or differ in their config; keep one each")
    pooled["config"]["parallel"] = "/".join(sorted({str(r["config"]["parallel"]) for r in sittings}, reverse=True))
    summary = pooled["summary"]
    for key in ("seeds", "eval_return", "final_return", "train_s"):
        summary[key] = [v for r in sittings for v in r["summary"][key]]
    summary["eval_return_iqm"] = aggregate.summarize(np.array(summary["eval_return"]))
    summary["wall_s"], summary["sittings"] = sum(r["summary"]["wall_s"] for r in sittings), len(sittings)
    pooled["curve"]["episode_return"] = [row for r in sittings for row in r["curve"]["episode_return"]]
    return pooled


def interval(summary) -> str:
    iqm, (low, high) = summary["iqm"], summary["ci"]
    return f"{iqm:,.0f} [{low:,.0f}, {high:,.0f}]"


def write_report(peer_records):
    rows, panels = [], []
    for entry in SUITES["mujoco"]:
        ours_path = os.path.join(OURS, f"{entry.name}.json")
        if not os.path.exists(ours_path):
            continue
        ours = load(ours_path)
        task, algo = entry.env.removeprefix("mujoco/"), SCRIPT_ALGO[entry.algo]
        budget = f"{entry.total_timesteps // 1000}k" if entry.total_timesteps < 10**6 else \
            f"{entry.total_timesteps // 10**6}M"
        # crossq's rows at each critic width, against sbx's CrossQ at that width
        width = entry.flags[entry.flags.index("--critic-width") + 1] if "--critic-width" in entry.flags else None
        peer = load_peer(peer_records, f"sbx-{algo}{f'-{width}' if width else ''}-{task}-{budget}")
        replay_path = os.path.join(peer_records, f"replay-{entry.name}.json")
        replay = load(replay_path) if os.path.exists(replay_path) else None
        s = ours["summary"]
        ours_name = entry.script + (f", critics {width} wide" if width else "")
        rows.append([f"{task}, {budget}", ours_name, f"{s['num_seeds']}", interval(s["eval_return_iqm"]),
                     interval(replay["gymnasium_return_iqm"]) if replay else "not replayed",
                     f"{s['train_s'] / 60:.0f} min + {s['compile_s']:.0f} s compile",
                     f"sbx {algo}: {interval(peer['summary']['eval_return_iqm'])} ({len(peer['summary']['seeds'])} "
                     f"seeds, {peer['summary']['wall_s'] / 60:.0f} min, {peer['config']['parallel']} at a time"
                     + (f", in {peer['summary']['sittings']} sittings)" if peer['summary']['sittings'] > 1 else ")")
                     if peer else "no peer run", entry.reference.text + (f" ({entry.reference.source})"
                                                                          if entry.reference.value else "")])
        panels.append((task, budget, f"{algo}{f' {width}' if width else ''}", ours, peer, entry))
    lines = ["# Gymnasium's MuJoCo tasks: ours on MJX beside sbx on C MuJoCo", "",
             "Built by `python benchmarks/studies/mujoco_peer.py --report` from the committed records: ours in "
             "`benchmarks/results/records/mujoco/` (`python benchmarks/learning.py --suite mujoco --record`), sbx's "
             "and the replays in `benchmarks/results/mujoco_peer/`. Eval returns: each seed's deterministic policy, "
             "mean of 10 episodes; IQM over seeds [95% stratified-bootstrap interval].", "",
             "| task, budget | ours | seeds | eval IQM (MJX) | replayed on Gymnasium's env | our time | peer, same "
             "recipe, same machine | published |", "|---|---|---:|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    with replaced(os.path.join(RESULTS, "mujoco_peer.md")) as f:
        f.write("\n".join(lines) + "\n")
    if panels:
        plot(panels, os.path.join(RESULTS, "mujoco_peer_curves.png"))
    print("\n".join(lines))


def iqm_band(curve):
    steps, returns = np.asarray(curve["env_steps"], float), np.array(curve["episode_return"], dtype=float)
    ok = ~np.isnan(returns).any(axis=0)
    band = aggregate.stratified_bootstrap_ci(returns[:, ok], lambda x: aggregate.iqm(x, axis=-2), reps=2000, seed=0)
    return steps[ok], band


def plot(panels, path):
    """One panel per task: each algorithm in a colour of its own, ours solid, sbx's dashed, each an IQM over seeds with
    its 95% band, and the published figure a dotted line in the algorithm's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, MaxNLocator

    tasks = list(dict.fromkeys((task, budget) for task, budget, *_ in panels))
    algos = list(dict.fromkeys(algo for _, _, algo, *_ in panels))  # one colour each, on every panel
    colors = dict(zip(algos, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.4 * len(tasks), 5.6), squeeze=False)
    for task, budget, algo, ours, peer, entry in panels:
        ax, color = axes.flat[tasks.index((task, budget))], colors[algo]
        for record, label, style in ((ours, f"{algo} (ours, MJX)", "-"),
                                     (peer, f"sbx {algo} (C MuJoCo)", "--")):
            if record is None:
                continue
            steps, band = iqm_band(record["curve"])
            seeds = len(record["curve"]["episode_return"])
            ax.plot(steps, band.point, color=color, ls=style, lw=1.4, label=f"{label}, {seeds} seeds")
            ax.fill_between(steps, band.low, band.high, color=color, alpha=0.12)
        if entry.reference.value is not None:
            ax.axhline(entry.reference.value, color=color, ls=":", lw=1,
                       label=f"{algo.split()[0]} published: {entry.reference.text}")
    for ax, (task, budget) in zip(axes.flat, tasks, strict=True):
        ax.set_title(f"{task}, {budget}", fontsize=10)
        ax.set_xlabel("env steps per seed")
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("training episode return")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below: clear of the curves
    fig.suptitle("Gymnasium's MuJoCo v5 tasks: IQM over seeds, 95% CI", fontsize=11)
    fig.tight_layout()
    with replaced(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)

"""What one update phase of an off-policy script asks of the machine, by XLA's own count: the FLOPs and bytes accessed
(`Compiled.cost_analysis()`) of one iteration (`update`: an env step and an update, `--num-envs 1`) compiled for
`--agents` agents vmapped on one device, at each width (`--hidden-size`, and crossq.py's `--critic-width` with it).
No timing: the counts are the compiler's, the same on a busy machine. A loop body (a delayed actor update inside
`blocks.run_if`) counts as if it ran every time.

    python benchmarks/studies/update_cost.py           # sac.py and crossq.py at 256 and 512: docs/speed.md
    python benchmarks/studies/update_cost.py --scripts td3.py sac.py --widths 64
"""

import importlib
import os
import sys
from dataclasses import dataclass

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=1"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import tyro  # noqa: E402


@dataclass(frozen=True)
class Args:
    scripts: tuple[str, ...] = ("sac.py", "crossq.py")
    widths: tuple[int, ...] = (256, 512)
    agents: int = 3
    """agents vmapped on the device (a 6-seed run on 2 cores puts 3 on each)"""
    env: str = "Pendulum-v1"


def cost(script, width, args):
    module = importlib.import_module(script.removesuffix(".py"))
    fields = {"critic_width": width} if "critic_width" in module.Config.__dataclass_fields__ else {}
    config = module.Config(env=args.env, num_envs=1, learning_starts=0, hidden_size=width, **fields)
    init, update = module.make_train_parts(config)
    runner = jax.vmap(init)(jax.random.split(jax.random.PRNGKey(0), args.agents))
    analysis = jax.jit(jax.vmap(update)).lower(runner).compile().cost_analysis()
    return analysis[0] if isinstance(analysis, list) else analysis


def main(args: Args):
    print(f"one update phase of {args.agents} agents on {args.env}, XLA's cost analysis")
    print("| width | script | GFLOP | GB accessed | FLOPs against the first | bytes against the first |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: |")
    for width in args.widths:
        first = None
        for script in args.scripts:
            c = cost(script, width, args)
            first = first or c
            print(f"| {width} | {script} | {c['flops'] / 1e9:.2f} | {c['bytes accessed'] / 1e9:.3f} | "
                  f"{c['flops'] / first['flops']:.2f}x | {c['bytes accessed'] / first['bytes accessed']:.2f}x |")


if __name__ == "__main__":
    main(tyro.cli(Args))

"""--sweep: its grid of points, their names and the checks of each point's values (agents are point-major:
`program.plan`). That a swept field can take one value per agent is checked on the program (`program.check_swept`)."""

import dataclasses
import itertools

from scanrl.harness.flags import MAX_COUNT, ConfigError, Flags, flag, require_finite


def point_label(point: dict) -> str:
    """`learning_rate=0.001,ent_coef=0`: a sweep point's name, also its directory in the run directory."""
    return ",".join(f"{k}={v:g}" for k, v in point.items())


def sweepable_fields(config) -> tuple[str, ...]:
    """The script's own numeric fields, not the shared flags nor booleans; `check_swept` tells which can vary."""
    return tuple(f.name for f in dataclasses.fields(config) if f.name not in Flags.__dataclass_fields__
                 and type(getattr(config, f.name)) in (int, float))


def sweep_points(algorithm, config) -> list[dict]:
    """The grid of --sweep values, one dict {field: value} per point (one empty point without --sweep); the last
    --sweep flag varies fastest. A bad spec, or a point the algorithm refuses (`check_sweep_points`): ConfigError."""
    sweepable = sweepable_fields(config)
    fields, grids = [], []
    for spec in config.sweep:
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        name = {"lr": "learning_rate"}.get(name, name)  # --sweep's short names
        if not sep or not name or not values.strip():
            raise ConfigError(f"--sweep {spec!r} is malformed; write field=v1,v2,... (e.g. --sweep lr=1e-3,3e-4)")
        if name in ("seed", "num_seeds"):
            raise ConfigError(f"--sweep {name}: seeds are vmapped already; use --seed and --num-seeds")
        if name not in {f.name for f in dataclasses.fields(config)}:
            raise ConfigError(f"--sweep {spec!r}: {algorithm.script} has no field {name!r}; sweepable: "
                              f"{', '.join(sweepable)}")
        if name not in sweepable:
            raise ConfigError(f"--sweep {name}: only the script's own numeric fields can be swept in one program "
                              f"({', '.join(sweepable)}); run one job per value")
        if name in fields:
            raise ConfigError(f"--sweep {name} is given twice; list all its values in one flag")
        try:
            parsed = [float(v) for v in values.split(",")]
        except ValueError:
            raise ConfigError(f"--sweep {spec!r}: the values must be numbers separated by commas, "
                              "e.g. --sweep lr=1e-3,3e-4") from None
        if isinstance(getattr(config, name), int):
            if not all(v.is_integer() for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} takes whole numbers")
            parsed = [int(v) for v in parsed]
            if any(abs(v) > MAX_COUNT for v in parsed):
                raise ConfigError(f"--sweep {spec!r}: {flag(name)} is an int32 inside the compiled program; keep its "
                                  f"values within +-{MAX_COUNT:,}")
        if len(set(parsed)) < len(parsed):
            raise ConfigError(f"--sweep {spec!r} repeats a value")
        fields.append(name)
        grids.append(parsed)
    points = [dict(zip(fields, values, strict=True)) for values in itertools.product(*grids)]
    check_sweep_points(algorithm, config, points)
    return points


def check_sweep_points(algorithm, config, points):
    """ConfigError naming the point unless the algorithm accepts each sweep point's values on their own."""
    if not config.sweep:
        return
    for point in points:
        try:
            point_config = dataclasses.replace(config, sweep=(), **point)
            require_finite(point_config)
            algorithm.check(point_config)
        except ConfigError as error:
            raise ConfigError(f"--sweep {point_label(point)}: {error}") from None

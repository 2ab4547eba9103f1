"""Where a run's time went: its jobs on a timeline, the idle core-time and the critical path.

Pure functions over job records (what :mod:`unie.pipeline.job_records` collects from the jobs themselves): each record
``{"id", "rule", "start", "end", "threads", "inputs", "outputs"}`` (seconds since the epoch, paths).

* :func:`dependencies`: job ``b`` depends on job ``a`` when one of ``b``'s inputs is one of ``a``'s outputs;
* :func:`critical_path`: the longest chain of dependent jobs by their wall-clock (a longest path in a DAG, by dynamic
  programming in start order): what bounds the run however many cores it has;
* :func:`summary`: the run's wall-clock (first start to last end), the core-seconds its jobs held (``threads`` x
  seconds, a job never counted above the run's cores), the idle core-seconds of ``cores`` over that wall-clock and
  their share, the critical path and its length;
* :func:`timeline_figure`: one lane per concurrently running job, the critical path in red.
"""

from __future__ import annotations


def dependencies(jobs: list[dict]) -> dict[str, set[str]]:
    """job id -> the ids of the jobs whose outputs it read."""
    made_by = {}
    for j in jobs:
        for f in j.get("outputs", []):
            made_by[f] = j["id"]
    return {j["id"]: {made_by[f] for f in j.get("inputs", []) if f in made_by and made_by[f] != j["id"]} for j in jobs}


def critical_path(jobs: list[dict]) -> tuple[list[str], float]:
    """The longest chain of dependent jobs by wall-clock: ``(ids in order, its total seconds)``."""
    if not jobs:
        return [], 0.0
    deps = dependencies(jobs)
    by_id = {j["id"]: j for j in jobs}
    best: dict[str, tuple[float, str | None]] = {}

    def length(i: str) -> float:  # memoised longest chain ending at job i (the DAG has no cycle)
        if i not in best:
            j = by_id[i]
            own = max(0.0, j["end"] - j["start"])
            prev = max(((length(d), d) for d in deps[i]), default=(0.0, None))
            best[i] = (own + prev[0], prev[1])
        return best[i][0]

    for j in sorted(jobs, key=lambda j: j["start"]):
        length(j["id"])
    end = max(best, key=lambda i: best[i][0])
    path, at = [], end
    while at is not None:
        path.append(at)
        at = best[at][1]
    return path[::-1], best[end][0]


def summary(jobs: list[dict], cores: int) -> dict:
    """The run's timing (module doc): ``wall_s``, ``cores``, ``busy_core_s``, ``idle_core_s``, ``idle_share``,
    ``critical_path`` (ids), ``critical_s``, ``jobs``."""
    if not jobs:
        return {
            "wall_s": 0.0,
            "cores": cores,
            "busy_core_s": 0.0,
            "idle_core_s": 0.0,
            "idle_share": None,
            "critical_path": [],
            "critical_s": 0.0,
            "jobs": 0,
        }
    t0, t1 = min(j["start"] for j in jobs), max(j["end"] for j in jobs)
    wall = max(t1 - t0, 1e-9)
    # core occupancy per time slice: never above the run's cores (a job asked for its threads)
    edges = sorted({t0, t1, *(j["start"] for j in jobs), *(j["end"] for j in jobs)})
    busy = 0.0
    for a, b in zip(edges, edges[1:]):
        held = sum(min(cores, j.get("threads", 1)) for j in jobs if j["start"] <= a and j["end"] >= b)
        busy += min(cores, held) * (b - a)
    path, length = critical_path(jobs)
    return {
        "wall_s": wall,
        "cores": cores,
        "busy_core_s": busy,
        "idle_core_s": cores * wall - busy,
        "idle_share": (cores * wall - busy) / (cores * wall),
        "critical_path": path,
        "critical_s": length,
        "jobs": len(jobs),
    }


def lanes(jobs: list[dict]) -> dict[str, int]:
    """job id -> a lane (the lowest free one when it starts), so concurrent jobs never share one."""
    free_at: list[float] = []
    out = {}
    for j in sorted(jobs, key=lambda j: (j["start"], j["id"])):
        lane = next((k for k, t in enumerate(free_at) if t <= j["start"]), None)
        if lane is None:
            lane = len(free_at)
            free_at.append(j["end"])
        else:
            free_at[lane] = j["end"]
        out[j["id"]] = lane
    return out


def timeline_figure(jobs: list[dict], info: dict, title: str = ""):
    """A Gantt chart of the jobs (one lane per concurrently running job), the critical path in red, the rest grey;
    the summary in the title."""
    import matplotlib.pyplot as plt

    t0 = min((j["start"] for j in jobs), default=0.0)
    lane = lanes(jobs)
    critical = set(info.get("critical_path", []))
    n = max(lane.values(), default=0) + 1
    figure, ax = plt.subplots(figsize=(11, 0.9 + 0.45 * n))
    for j in jobs:
        a, b = (j["start"] - t0) / 60, (j["end"] - t0) / 60
        colour = "tab:red" if j["id"] in critical else "tab:grey"
        ax.barh(lane[j["id"]], b - a, left=a, color=colour, alpha=0.85, edgecolor="white")
        if b - a > 0.02 * max(info.get("wall_s", 1) / 60, 1e-9):
            ax.text(a + (b - a) / 2, lane[j["id"]], j["rule"], ha="center", va="center", fontsize=6, clip_on=True)
    ax.set_yticks(range(n), [f"lane {k + 1}" for k in range(n)], fontsize=7)
    ax.set_xlabel("minutes since the run's first job started")
    share = info.get("idle_share")
    ax.set_title(
        (title + "\n" if title else "") + f"{info.get('jobs', 0)} jobs, {info.get('wall_s', 0) / 60:.1f} min on "
        f"{info.get('cores')} cores; idle core-time {info.get('idle_core_s', 0) / 60:.1f} core-min"
        + ("" if share is None else f" ({100 * share:.0f} %)")
        + f"; critical path (red) "
        f"{info.get('critical_s', 0) / 60:.1f} min",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


__all__ = ["critical_path", "dependencies", "lanes", "summary", "timeline_figure"]

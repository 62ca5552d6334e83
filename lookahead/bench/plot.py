"""Plots of a benchmark document (matplotlib is imported only here, and only when asked for)."""

from __future__ import annotations


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeError("plots need matplotlib: pip install 'lookahead-decoding[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _per_method(doc: dict, key: str) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {label: [] for label in doc["methods"]}
    for entry in doc["prompts"]:
        if entry.get(key) is not None:
            values[entry["method"]].append(entry[key])
    return {label: v for label, v in values.items() if v}


def _distribution(ax, values: dict[str, list[float]], title: str, ref: float | None, colors: dict) -> None:
    labels = list(values)
    ax.boxplot([values[k] for k in labels], showfliers=False)
    for i, label in enumerate(labels, 1):
        pts = values[label]
        xs = [i + 0.25 * ((j % 7) / 6 - 0.5) for j in range(len(pts))]
        ax.scatter(xs, pts, s=10, alpha=0.6, color=colors.get(label, "C0"))
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20)
    if ref is not None:
        ax.axhline(ref, color="grey", linestyle="--", linewidth=1)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)


def bench_plot(doc: dict, path: str) -> None:
    """Per-prompt speed-up over greedy and tokens per forward, one box per method."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    colors = {label: f"C{i % 10}" for i, label in enumerate(doc["methods"])}
    speedups = {k: v for k, v in _per_method(doc, "speedup").items() if k != doc["config"].get("baseline")}
    _distribution(left, speedups or {"(none)": [0.0]}, "per-prompt wall speed-up vs greedy", 1.0, colors)
    _distribution(right, _per_method(doc, "tokens_per_forward"), "tokens per forward", 1.0, colors)
    cfg = doc["config"]
    name = cfg.get("model_name") or cfg.get("model")
    fig.suptitle(f"{name} · {cfg.get('dtype')} · {cfg.get('prompts')} · {cfg.get('max_new_tokens')} new tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep_heatmap(cells: list[dict], path: str, title: str = "") -> None:
    """One window x ngram heatmap of speed-up per guesses value; ``cells`` hold window/ngram/guesses/speedup."""
    plt = _pyplot()
    guesses = sorted({c["guesses"] for c in cells})
    windows = sorted({c["window"] for c in cells})
    ngrams = sorted({c["ngram"] for c in cells})
    vmax = max((c["speedup"] or 0.0 for c in cells), default=1.0)
    fig, axes = plt.subplots(1, len(guesses), figsize=(3.6 * len(guesses) + 1, 3.6), squeeze=False)
    for ax, g in zip(axes[0], guesses):
        grid = [[float("nan")] * len(ngrams) for _ in windows]
        for c in cells:
            if c["guesses"] == g and c["speedup"] is not None:
                grid[windows.index(c["window"])][ngrams.index(c["ngram"])] = c["speedup"]
        image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=max(vmax, 1.0), origin="lower", aspect="auto")
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if value == value:  # not NaN
                    shade = "black" if value > 0.6 * max(vmax, 1.0) else "white"
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=shade, fontsize=8)
        ax.set_xticks(range(len(ngrams)), ngrams)
        ax.set_yticks(range(len(windows)), windows)
        ax.set_xlabel("ngram")
        ax.set_ylabel("window")
        ax.set_title(f"guesses={g}")
    fig.colorbar(image, ax=axes[0].tolist(), label="speed-up vs greedy")
    if title:
        fig.suptitle(title, y=1.04)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)

"""Pictures of a partition: color-set sizes (thesis Fig. 3.3) and the strata grid (Fig. 3.4).

matplotlib is imported inside the functions with the Agg backend, so importing `partition`
stays light and plotting works without a display. `format` (e.g. "png") is passed to savefig;
without it matplotlib takes the format from the file name and appends ".png" to a name
without an extension, so a caller that writes to a temporary name passes it.
"""

from __future__ import annotations

import numpy as np


def _pyplot():
    # why lazy: matplotlib takes ~0.5 s to import; only a plot needs it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_color_sets(partitions, path, format=None) -> str:
    """Write one bar chart per coloring of the functions per color set (Fig. 3.3); return path.

    Pass COLOR and COLOR-B partitions of the same data to see first fit's front-loaded sets
    beside the balanced ones.
    """
    plt = _pyplot()
    partitions = list(partitions)
    fig, axes = plt.subplots(1, len(partitions), figsize=(5 * len(partitions), 3.5), squeeze=False)
    for ax, part in zip(axes[0], partitions):
        sizes = np.asarray(part.info["color_sizes"])
        ax.bar(np.arange(sizes.size), sizes, width=1.0, color="tab:blue")
        ax.set_title(f"{part.scheme.upper()}: {sizes.size} colors")
        ax.set_xlabel("color")
        ax.set_ylabel("number of functions")
    fig.tight_layout()
    fig.savefig(path, format=format)
    plt.close(fig)
    return str(path)


def plot_strata(part, path, format=None) -> str:
    """Write the strata grid, rectangles colored by subset with their counts (Fig. 3.4); return path."""
    plt = _pyplot()
    n_rows, n_cols = part.shape
    fig, ax = plt.subplots(figsize=(6, 6 * n_rows / max(n_cols, 1) if n_cols else 6))
    palette = plt.get_cmap("tab10" if part.n_subsets <= 10 else "tab20")
    for k, subset in enumerate(part.subsets):
        for b, block in enumerate(subset):
            p, q = part.block_intervals[k][b]
            top, bottom = part.row_bounds[p], part.row_bounds[p + 1]
            left, right = part.col_bounds[q], part.col_bounds[q + 1]
            ax.add_patch(
                plt.Rectangle(
                    (left, top),
                    right - left,
                    bottom - top,
                    facecolor=palette(k % palette.N),
                    edgecolor="black",
                    alpha=0.6,
                )
            )
            ax.text(
                (left + right) / 2,
                (top + bottom) / 2,
                str(block.size),
                ha="center",
                va="center",
                fontsize=8,
            )
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)  # matrix orientation: row 0 at the top
    ax.set_xlabel("items (columns)")
    ax.set_ylabel("users (rows)")
    ax.set_title(
        f"{part.scheme.upper()}: {part.n_subsets} strata, imbalance {part.stats()['imbalance']:.2f}"
    )
    fig.tight_layout()
    fig.savefig(path, format=format)
    plt.close(fig)
    return str(path)


def plot_block_sizes(part, path, format=None) -> str:
    """Write stacked bars of block sizes per subset (any scheme; overlaps in the title); return path."""
    plt = _pyplot()
    sizes = np.array(part.block_sizes(), dtype=float)
    fig, ax = plt.subplots(figsize=(max(5, 0.35 * part.n_subsets + 2), 3.5))
    bottom = np.zeros(sizes.shape[0])
    for b in range(sizes.shape[1]):
        ax.bar(np.arange(sizes.shape[0]), sizes[:, b], bottom=bottom, label=f"block {b}")
        bottom += sizes[:, b]
    ax.set_xlabel("subset (schedule order)")
    ax.set_ylabel("number of functions")
    title = f"{part.scheme.upper()}: K={part.n_subsets}, B={sizes.shape[1]}"
    if "overlaps" in part.info:
        title += f", shared parameters {sum(part.info['overlaps'])}"
    ax.set_title(title)
    if sizes.shape[1] <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format=format)
    plt.close(fig)
    return str(path)


def plot_partition(part, path, format=None) -> str:
    """Write the picture that fits the scheme: Fig. 3.4 grid, Fig. 3.3 bars, or block sizes."""
    if part.block_intervals is not None:
        return plot_strata(part, path, format)
    if "color_sizes" in part.info:
        return plot_color_sets([part], path, format)
    return plot_block_sizes(part, path, format)

"""The README's results table as a chart on the site (docs/results.md): each row's dev scores per task, a dot with
its seed spread (± one standard deviation) where the row is a mean over seeds. The numbers are read from the README's
table, the one place they are typed; the chart and the numbers it drew (results.json, which
tests/test_docs_site.py checks against the table) are written into docs/pictures/results/. Run it after changing
the table:

    .venv/bin/python docs/generate/results_chart.py
"""
import json
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
OUT = ROOT / "docs" / "pictures" / "results"
SCORES = ("SST acc", "Quora acc", "STS r", "overall")  # the table's columns the chart draws, one panel each


def plain(cell: str) -> str:
    """A cell's text without its Markdown: links' text kept, backticks and bold marks off."""
    return re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", cell).replace("`", "").replace("**", "").strip()


def label(cell: str) -> str:
    """A row's name for the chart: its model and recipe, without the parentheses that say where it is documented
    (the seeds stay: "3 seeds")."""
    text = plain(cell)
    seeds = re.search(r"mean of (\d+) seeds", text)
    text = re.sub(r"\s*\([^()]*\)", "", text)
    return f"{text}, {seeds[1]} seeds" if seeds else text


def score(cell: str) -> tuple[float, float] | None:
    """"0.5056 ± 0.0068" -> (0.5056, 0.0068); a score of one seed has a spread of 0; "-" (not measured) is None."""
    text = plain(cell)
    if text == "-":
        return None
    mean, _, spread = text.partition("±")
    return float(mean), float(spread) if spread.strip() else 0.0


def rows(readme: str) -> dict[str, dict[str, tuple[float, float] | None]]:
    """The results table of the README: each row's label and its scores (mean, spread) by column."""
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [plain(cell) for cell in lines[0].strip("|").split("|")]
    found = {}
    for line in lines[2:]:
        cells = dict(zip(header, line.strip("|").split("|")))
        found[label(cells[header[0]])] = {name: score(cells[name]) for name in SCORES}
    return found


def draw(table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    figure, axes = plt.subplots(1, len(SCORES), figsize=(12, 0.55 * len(names) + 1.6), sharey=True)
    for ax, column in zip(axes, SCORES):
        for index, name in enumerate(names):
            if table[name][column] is None:
                continue
            mean, spread = table[name][column]
            ax.errorbar(mean, index, xerr=spread or None, fmt="o", color=f"C{index}", capsize=4)
        ax.set_title(f"dev {column}")
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.15)
    labels = [textwrap.fill(name, 30, break_on_hyphens=False) for name in names]  # all-mpnet-base-v2 kept whole
    axes[0].set_yticks(range(len(names)), labels, fontsize=8)
    axes[0].invert_yaxis()  # the table's order, top to bottom
    figure.suptitle("The README's results: dev scores, each a dot; a bar: ± one standard deviation over seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)


def main() -> None:
    table = rows(README.read_text(encoding="utf-8"))
    OUT.mkdir(parents=True, exist_ok=True)
    draw(table, OUT / "results.png")
    (OUT / "results.json").write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}/results.png and results.json: {len(table)} rows")


if __name__ == "__main__":
    main()

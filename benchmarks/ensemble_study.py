"""Do ensembles of finished runs pay, and do weights fitted on dev only fit dev's noise?

    python benchmarks/ensemble_study.py --runs runs/quality

Every folder under --runs with saved outputs (OUTPUT_DIR/best/outputs-*.pt, see ensemble.py) is a member; one
whose outputs are incomplete (a run stopped before its test predictions) is left out, and named. For
the members of each group (all runs, and each group of runs whose names share a prefix before "-s<seed>"), per
task: the best member, the plain mean (ensemble.py --method mean) and the weights fitted on dev by greedy
selection (--method weighted), all scored on dev. The best member and the weighted ensemble are chosen on the
very rows they are scored on, so their dev scores are optimistic. The held-out rows make the fair comparison:
dev is split in two random halves; the best member and the weights are chosen on one half and scored on the
other, and the two halves' scores are averaged.
"""
import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from minbert.common.errors import CheckpointError  # noqa: E402
from minbert.common.files import DEFAULT_DATA, write_json  # noqa: E402
from minbert.common.tables import markdown_table  # noqa: E402
from minbert.commands.ensemble import aligned, combine, dev_score, fit_weights  # noqa: E402
from minbert.evaluation.outputs import dev_labels, load_member  # noqa: E402
from minbert.tasks import COURSE_TASKS, REGISTRY, summary  # noqa: E402

METHODS = {"best member": "best", "mean": "mean", "weighted": "weighted"}


def halves(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two disjoint random halves of range(count) that together cover it."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    return order[: count // 2], order[count // 2:]


def study(members: dict[str, dict], data_dir: Path, rounds: int, seed: int) -> dict[str, dict[str, float]]:
    """Row name -> task -> dev metric, for the three methods on all of dev and on held-out halves."""
    rows = defaultdict(dict)
    for task in REGISTRY:
        if not all(task in member for member in members.values()):
            continue
        ids, by_member = aligned(members, task, "dev")
        outputs, labels = list(by_member.values()), dev_labels(data_dir, task, ids)
        for row, method in METHODS.items():
            weights = fit_weights(method, task, outputs, labels, rounds)
            rows[f"{row}, chosen on dev"][task] = dev_score(task, combine(outputs, weights), labels)
            held_out = []
            for fit, score in (halves(len(ids), seed), reversed(halves(len(ids), seed))):
                weights = fit_weights(method, task, [o[fit] for o in outputs], labels[fit], rounds)
                held_out.append(dev_score(task, combine([o[score] for o in outputs], weights), labels[score]))
            rows[f"{row}, chosen on the other half"][task] = sum(held_out) / 2
    return {name: summary(metrics) for name, metrics in rows.items()}


def groups_of(names: list[str]) -> dict[str, list[str]]:
    """'all runs' and, for names like base-s1, base-s2, one group per prefix with at least two runs."""
    groups = defaultdict(list)
    for name in names:
        groups[re.sub(r"-s\d+$", "", name)].append(name)
    return {"all runs": names, **{prefix: group for prefix, group in groups.items() if len(group) > 1}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True,
                        help="folder whose run folders (each with best/outputs-*.pt) are the members")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="the course's data (dev labels)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of greedy selection of the weighted ensemble")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random split of dev into halves")
    parser.add_argument("--out", type=Path, help="also write every table's numbers here as JSON (groups, and the "
                                                 "runs left out with why)")
    args = parser.parse_args(argv)
    names = sorted(path.parent.parent.name for path in args.runs.glob("*/best/outputs-*-dev.pt"))
    names = list(dict.fromkeys(names))
    if not names:
        parser.exit(2, f"{args.runs}: no run folder with best/outputs-*.pt\n")
    members, left_out = {}, {}
    for name in names:
        try:
            members[name] = load_member(args.runs / name)
        except CheckpointError as error:
            left_out[name] = str(error)
    if left_out:
        print("Left out, their outputs incomplete:\n" + "\n".join(f"- {name}: {why}" for name, why in left_out.items()))
    names = list(members)
    if not names:
        parser.exit(2, f"{args.runs}: no run folder with complete outputs\n")
    report = {}
    for group, group_names in groups_of(names).items():
        report[group] = study({n: members[n] for n in group_names}, args.data_dir, args.rounds, args.seed)
        print(f"\n{group} ({len(group_names)} members: {', '.join(group_names)})\n")
        print(markdown_table(report[group], [*COURSE_TASKS, "overall"], label="ensemble", digits=4,
                             headers=[*(REGISTRY[name].title for name in COURSE_TASKS), "overall"]))
    if args.out:
        write_json(args.out, {"groups": report, "left_out": left_out})


if __name__ == "__main__":
    main()

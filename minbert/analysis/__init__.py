"""The pictures of analyze.py, one module each: its flags (a config dataclass), what it computes and how it is drawn;
its build(config) returns a report.Report (its Figures, a Markdown table and its numbers), which report.write saves
as PNGs, .md and .json. report.py and figures.py (each model's look, ticks, legends) hold what they share.

    layers      every layer's STS Spearman (Contrastive Tension, Figures 1, 2 and 5; SG-BERT's survey)
    spread      cosine similarity of STS training pairs by gold-score bucket (Contrastive Tension, Figure 3)
    embeddings  alignment and uniformity (Wang and Isola, 2020; SimCSE's picture)
    errors      a multi-task run's dev errors, each task's as its kind describes them (tasks.py)
    curves      training loss and dev metrics over optimizer steps
"""

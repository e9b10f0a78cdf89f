"""The pictures of analyze.py, one module each: its flags (a config dataclass), what it computes, how it is drawn
and what it writes (a PNG, a Markdown table and its numbers as JSON). report.py and figures.py hold what they share.

    layers      every layer's STS Spearman (Contrastive Tension, Figures 1, 2 and 5; SG-BERT's survey)
    spread      cosine similarity of STS training pairs by gold-score bucket (Contrastive Tension, Figure 3)
    embeddings  alignment and uniformity (Wang and Isola, 2020; SimCSE's picture)
    errors      a multi-task run's dev errors, each task's as its kind describes them (tasks.py)
    curves      training loss and dev metrics over optimizer steps
"""

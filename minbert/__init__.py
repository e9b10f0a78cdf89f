"""minBERT: one BERT encoder fine-tuned for sentiment, paraphrase detection and semantic similarity (the Stanford
CS224N default final project), with contrastive pretraining, ensembles and the course's leaderboard files.

The command is `minbert` (minbert/commands/main.py); in Python, what a user needs is importable from here:

    from minbert import MultitaskPredictor, SentenceEncoder
    model = MultitaskPredictor.from_run("runs/multitask")
    embeddings = SentenceEncoder.from_pretrained("all-MiniLM-L6-v2").encode(["A man plays a guitar."])

The names are imported when first used, so that `import minbert` (and `minbert --version`) does not load torch.
"""
import importlib

__version__ = "0.5.0"

# name -> the module that defines it
_API = {
    "MultitaskPredictor": "minbert.predictor",
    "SentenceEncoder": "minbert.models",
    "BertModel": "minbert.models",
    "BertConfig": "minbert.models",
    "Tokenizer": "minbert.models",
    "AdamW": "minbert.models",
    "from_pretrained": "minbert.models",
    "embed_sentences": "minbert.models",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'minbert' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)

"""Sentences of a bank of unlabeled text near a task's own (SentAugment, Du et al. 2021): the bank read and
checked, its embeddings computed once per encoder and kept in a cache folder a chunk a file (a killed command
resumes at the first missing chunk), and an exact nearest-neighbour search by cosine similarity over them, a chunk
at a time, so that memory stays bounded whatever the bank's size.

    bank = read_bank("../shared/data/unlabeled-sentences.txt")
    cache = BankEmbeddings(encoder, "all-MiniLM-L6-v2", bank, "runs/bank-embeddings")
    cache.build()                                     # resumable
    scores, rows = cache.nearest(queries, k=4)        # [queries, k] each
"""
import hashlib
import logging
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from minbert.common.errors import DataError
from minbert.common.files import atomic_file, make_folders, read_json, remove_empty, write_json
from minbert.common.progress import Progress
from minbert.data.readers import read_lines
from minbert.models.sentence_encoder import SentenceEncoder

log = logging.getLogger(__name__)

CHUNK = 4096  # sentences a cache file: about 20 s of one CPU thread for all-MiniLM-L6-v2, 6 MB
QUERY_BLOCK = 1024  # queries scored against a chunk at once: [1024, 4096] floats, 16 MB


def read_bank(path: str | Path) -> list[str]:
    """The bank's sentences, one a line, blank lines skipped; a bank that is empty or not UTF-8 is refused (its
    sentences would be labelled and trained on as they are)."""
    sentences, report = read_lines(path)
    if report.replaced_bytes_lines:
        raise DataError(f"{path}: not UTF-8 text (bytes that are not UTF-8 on line "
                        f"{report.replaced_bytes_lines[0]}); convert it, e.g. iconv -f latin1 -t utf-8")
    if not sentences:
        raise DataError(f"{path}: no sentences (an empty bank); give a file of one sentence a line")
    return sentences


def bank_key(model: str, sentences: list[str], pooling: str, max_length: int) -> str:
    """A cache folder's name: the encoder's, and a digest of what its embeddings depend on."""
    digest = hashlib.sha256(f"{model}\n{pooling}\n{max_length}\n".encode())
    for sentence in sentences:
        digest.update(sentence.encode("utf-8") + b"\n")
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(str(model)).name)
    return f"{name}-{digest.hexdigest()[:16]}"


class BankEmbeddings:
    """The embeddings of a bank's sentences by one encoder, kept in `cache_root`/KEY/ (bank_key): chunk-NNNNN
    files of CHUNK sentences each, each written whole, and info.json saying what they are."""

    def __init__(self, encoder: SentenceEncoder, model: str, sentences: list[str], cache_root: str | Path,
                 batch_size: int = 64):
        self.encoder, self.sentences, self.batch_size = encoder, sentences, batch_size
        self.folder = Path(cache_root) / bank_key(str(model), sentences, encoder.pooling, encoder.max_length)
        self.info = {"model": str(model), "sentences": len(sentences), "pooling": encoder.pooling,
                     "max_length": encoder.max_length, "chunk": CHUNK}
        self.count = (len(sentences) + CHUNK - 1) // CHUNK

    def _chunk_path(self, index: int) -> Path:
        return self.folder / f"chunk-{index:05d}.safetensors"

    def missing(self) -> list[int]:
        return [i for i in range(self.count) if not self._chunk_path(i).is_file()]

    def build(self) -> None:
        """Embed the chunks not yet in the cache, with progress."""
        missing = self.missing()
        if not missing:
            log.info("bank embeddings: all %s sentences cached in %s", f"{len(self.sentences):,}", self.folder)
            return
        made, info = make_folders(self.folder), self.folder / "info.json"
        try:
            if not info.is_file():
                write_json(info, self.info)
            elif read_json(info) != self.info:
                raise DataError(f"{self.folder}: a cache of other embeddings under this name; remove the folder")
            self._embed(missing)
        except BaseException:
            if made and self.missing() == list(range(self.count)):  # a cache this command began holds no chunk
                info.unlink(missing_ok=True)
                remove_empty(made)
            raise

    def _embed(self, missing: list[int]) -> None:
        todo = sum(len(self.sentences[i * CHUNK:(i + 1) * CHUNK]) for i in missing)
        log.info("bank embeddings: embedding %s of %s sentences into %s", f"{todo:,}", f"{len(self.sentences):,}",
                 self.folder)
        with Progress(len(self.sentences), "embedding the bank", "sentence",
                      initial=len(self.sentences) - todo) as bar:
            for index in missing:
                part = self.sentences[index * CHUNK:(index + 1) * CHUNK]
                embeddings = F.normalize(self.encoder.encode(part, self.batch_size), dim=-1)
                with atomic_file(self._chunk_path(index)) as temp:
                    save_file({"embeddings": embeddings.contiguous()}, str(temp))
                bar.update(len(part))

    def chunks(self) -> Iterator[tuple[int, torch.Tensor]]:
        """(first row, [rows, hidden] unit-length embeddings) of each chunk, in order; build() first."""
        for index in range(self.count):
            yield index * CHUNK, load_file(str(self._chunk_path(index)))["embeddings"]

    def nearest(self, queries: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """For each query embedding, the cosine similarities and bank rows of its k nearest bank sentences, best
        first: exact, over one chunk at a time (memory: the queries, one chunk and the running best k)."""
        if k > len(self.sentences):
            raise DataError(f"{k} neighbours asked of a bank of {len(self.sentences):,} sentences")
        return nearest_in_chunks(F.normalize(queries.float(), dim=-1), self.chunks(), k)


def nearest_in_chunks(queries: torch.Tensor, chunks, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest dot products of each query with the rows of the chunks ((first row, [rows, hidden]) each):
    ([queries, k] values, [queries, k] rows), largest first."""
    best = torch.full((len(queries), k), -float("inf"))
    rows = torch.full((len(queries), k), -1, dtype=torch.long)
    for first, chunk in chunks:
        ids = torch.arange(first, first + len(chunk))
        for start in range(0, len(queries), QUERY_BLOCK):
            block = slice(start, start + QUERY_BLOCK)
            scores = torch.cat([best[block], queries[block] @ chunk.float().T], dim=1)
            candidates = torch.cat([rows[block], ids.expand(len(scores), -1)], dim=1)
            best[block], top = scores.topk(k, dim=1)
            rows[block] = candidates.gather(1, top)
    return best, rows

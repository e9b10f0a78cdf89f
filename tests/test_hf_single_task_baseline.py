"""benchmarks/hf_single_task_baseline.py: the transformers loop a careful user would write (sdpa attention, bf16
autocast when asked, no per-step read of the loss), and a JSON file that names its precision and device."""
import json
import sys

import pytest
import torch
import transformers

from benchmarks import hf_single_task_baseline

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_tuned_loop_in_bf16(tmp_path, tiny_model, course_data, monkeypatch):
    built, logits_dtypes, reads = [], set(), []
    from_pretrained = transformers.AutoModelForSequenceClassification.from_pretrained

    def recording(*args, **kwargs):
        built.append(kwargs)
        model = from_pretrained(*args, **kwargs)
        model.register_forward_hook(lambda module, inputs, output: logits_dtypes.add(output.logits.dtype))
        return model

    item = torch.Tensor.item

    def counted(self):  # the loop's own reads (torch's AdamW on a CPU reads its step count, on a GPU it does not)
        if sys._getframe(1).f_code.co_filename == hf_single_task_baseline.__file__:
            reads.append(1)
        return item(self)

    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained", recording)
    monkeypatch.setattr(torch.Tensor, "item", counted)
    out = tmp_path / "baseline.json"
    hf_single_task_baseline.main(["--model", str(tiny_model), "--data", str(course_data), "--epochs",
                                  "sst=2,para=2,sts=2", "--batch-size", "8", "--max-length", "32", "--device", "cpu",
                                  "--precision", "bf16", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["precision"] == "bf16" and report["device"] == "cpu"
    assert [r["task"] for r in report["results"]] == ["sst", "para", "sts"]
    assert all(r["train_seconds"] > 0 and r["dev_seconds"] >= 0 for r in report["results"])
    assert [kwargs["attn_implementation"] for kwargs in built] == ["sdpa"] * 3
    assert logits_dtypes == {torch.bfloat16}  # every forward pass under bf16 autocast
    # 40 training rows in batches of 8: 10 steps a task; the loss is read once an epoch and once at the end.
    assert len(reads) == 3 * (2 + 1)

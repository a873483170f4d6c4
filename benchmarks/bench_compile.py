"""What `torch.compile` sees in one training step, and how often it compiles over batches of
changing shapes.

A compiled forward pass pays off when TorchDynamo captures it as one graph and compiles it once or
twice, not once per sentence length. This counts, on a CPU (graph breaks come from the Python code,
so a CPU is enough to find them):

- the graphs and graph breaks in one forward pass of our model (`torch._dynamo.explain`), with the
  reason and the line of each break; a data-dependent `if` on a tensor (which on a GPU is also a
  wait for the device) is one;
- the compilations over a stream of length-bucketed batches like a real epoch's
  (`bench_gpu_training.wmt_like_batches`, every batch a new shape), with the `eager` backend by
  default so that only TorchDynamo's work is counted, and the wall time of the compiled steps
  (`--backend inductor` compiles for real; slow on a small CPU).

    python benchmarks/bench_compile.py
    python benchmarks/bench_compile.py --backend inductor --batches 8
"""

from __future__ import annotations

import argparse
import time

import torch
import torch._dynamo
from bench_gpu_training import wmt_like_batches
from common import PAD
from torch._dynamo.utils import counters

from annotated_transformer.config import preset
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.pipeline import EpochOptions, train_epoch
from annotated_transformer.training import Updates, noam_optimizer


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", default="tiny", help="model size, post-norm (tiny, small, multi30k, base, big)"
    )
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=2000, help="padded tokens per batch")
    parser.add_argument(
        "--batches",
        type=int,
        default=30,
        help="training batches to compile and run, each a new shape",
    )
    parser.add_argument(
        "--backend",
        default="eager",
        help="torch.compile backend: eager (TorchDynamo only) or inductor",
    )
    args = parser.parse_args()

    torch.manual_seed(0)
    config = preset(args.preset)
    model = config.build(args.vocab, args.vocab)
    # more than enough: a WMT-like sentence pads to about 25 tokens
    sentences = args.batches * args.max_tokens // 15
    batches = wmt_like_batches(sentences, args.max_tokens, args.vocab)[: args.batches]
    shapes = {(tuple(b.src.shape), tuple(b.tgt.shape)) for b in batches}
    print(
        f"torch {torch.__version__}; {args.preset} model; {len(batches)} batches, "
        f"{len(shapes)} distinct shapes; backend {args.backend}"
    )

    b = batches[0]
    explained = torch._dynamo.explain(model)(b.src, b.tgt, b.src_mask, b.tgt_mask)
    graphs, breaks = explained.graph_count, explained.graph_break_count
    print(f"one forward pass: {graphs} graphs, {breaks} graph breaks")
    for reason in explained.break_reasons:
        frame = reason.user_stack[-1] if reason.user_stack else None
        print(
            f"  break: {reason.reason.splitlines()[0][:80]}"
            + (f" at {frame.filename.split('/')[-1]}:{frame.lineno}: {frame.line}" if frame else "")
        )

    torch._dynamo.reset()
    counters.clear()
    criterion = LabelSmoothing(args.vocab, padding_idx=PAD, smoothing=0.1)
    loss_fn = sequence_loss(criterion, model.generator)
    optimizer, scheduler = noam_optimizer(model, config.d_model, 1.0, 400)
    compiled = torch.compile(model, backend=args.backend)
    start = time.perf_counter()
    updates = Updates(optimizer, scheduler)
    train_epoch(batches, compiled, loss_fn, updates, options=EpochOptions(progress=False))
    seconds = time.perf_counter() - start
    graphs = counters["stats"]["unique_graphs"]
    print(f"training on {len(batches)} batches: {graphs} graphs compiled, {seconds:.1f} s")


if __name__ == "__main__":
    main()

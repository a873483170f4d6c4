""""Attention Is All You Need" as a literate, tested PyTorch library: notebooks that quote the paper beside the code that implements it.

Modules:

- `annotated_transformer.cli`: The console command `annotated-transformer`: train, evaluate and translate on Multi30k."""

__version__ = "0.1.0"

""""Attention Is All You Need" as a literate, tested PyTorch library: notebooks that quote the paper beside the code that implements it.

The package, Part by Part, with each module's main entry points. Modules are listed in their layering
order: each imports only from the modules above it (the trainer uses Part 6's helpers, so
`distributed` sits above `trainer`; checkpoints rebuild Part 8's recurrent models, so `recurrent` sits
above `checkpoint`).

- Part 1, `annotated_transformer.model`: `make_model`, `ModelConfig` (`.preset("base").build(...)`), `EncoderDecoder`, `count_parameters`
- Part 2, `annotated_transformer.training`: `Batch`, `run_epoch`, `noam_optimizer`, `LabelSmoothing`, `greedy_decode` (the teaching version)
- Part 3, `annotated_transformer.decoding`: `greedy_search`, `beam_search`, the `Decoder` interface, `CachedDecoder`
- Part 8, `annotated_transformer.recurrent`: `RecurrentConfig` (`.build(...)`), `RecurrentEncoderDecoder`, `model_config`
- Part 4, `annotated_transformer.data`: `load_multi30k`, `read_parallel`, `load_tokenizers`, `Vocab`, `make_loader`
- Part 4.1, `annotated_transformer.subwords`: `SubwordTokenizer` (`.train`, `.tokenize`, `.detokenize`, `.state_dict`), `shared_vocab`, `learn_bpe` and `apply_bpe` (the teaching versions)
- Part 5.1, `annotated_transformer.checkpoint`: `save_checkpoint`, `load_checkpoint`, `model_from_checkpoint`, `tokenizers_from_checkpoint`, `average_last`
- Part 5.2, `annotated_transformer.translation`: `translate`, `detokenize`, `bleu`
- Part 6, `annotated_transformer.distributed`: `setup_distributed`, `wrap_for_training`, `model_flops_utilization`
- Part 5.3, `annotated_transformer.trainer`: `TrainConfig`, `train`
- Part 7, `annotated_transformer.visualization`: `sentence_attention`, `plot_attention`, `plot_sentence`, `AttentionView` (`AttentionMaps.to_html()`)
- `annotated_transformer.cli` (hand-written): the console command `annotated-transformer`

Modules:

- `annotated_transformer.cli`: The console command `annotated-transformer`: train, evaluate and translate, on Multi30k or your own parallel text."""

__version__ = "0.2.0"

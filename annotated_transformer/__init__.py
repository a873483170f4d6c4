""""Attention Is All You Need" as a literate, tested PyTorch library: notebooks that quote the paper beside the code that implements it.

The package, module by module, with the chapter that explains each and its main entry points. The
modules are listed in their layering order: each imports only from the modules above it in this list,
which is the one place the order is written (a test reads it from here). The main entry points are
also the package's own names, each imported on first use: `from annotated_transformer import
make_model, Translator, train`.

- `annotated_transformer.model` (the model): `make_model`, `ModelConfig`, `EncoderDecoder`, `count_parameters`, `check_hyperparameters`
- `annotated_transformer.batching` (batches and masks): `Batch`, `collate`, `copy_task_batches`
- `annotated_transformer.training` (the training loop and the schedule): `run_epoch`, `rate`, `noam_optimizer`, `TrainState`
- `annotated_transformer.losses` (label smoothing): `LabelSmoothing`, `sequence_loss`
- `annotated_transformer.decoding` (decoding): `greedy_decode`, `length_penalty`, `beam_decode`
- `annotated_transformer.translation` (from a model to translations): `Tokenizer`, `bleu`
- `annotated_transformer.visualization` (what the model attends to): `head_measures`, `even_weights`
- `annotated_transformer.recurrent` (the recurrent systems): `RecurrentConfig`, `RecurrentEncoderDecoder`
- `annotated_transformer.config` (configuration): `PRESETS`, `preset`, `TrainConfig`, `RuntimeOptions`, `resolve_config`
- `annotated_transformer.trees` (trees as sequences): `Treebank`, `linearize`, `delinearize`, `evalb`, `score_parses`
- `annotated_transformer.data` (data): `load_multi30k`, `read_parallel`, `SpacyTokenizer`, `Vocab`, `TokenBatchSampler`, `make_loader`
- `annotated_transformer.subwords` (subwords): `SubwordTokenizer`, `shared_vocab`, `learn_bpe`, `apply_bpe`
- `annotated_transformer.checkpoint` (checkpoints): `RunCheckpoint`, `save_checkpoint`, `load_checkpoint`, `average_last`
- `annotated_transformer.runs` (run folders): `claim_run_folder`, `save_epoch`
- `annotated_transformer.distributed` (many GPUs): `setup_distributed`, `wrap_for_training`, `model_flops_utilization`
- `annotated_transformer.fast_decoding` (fast decoding): `Search`, `Translating`, `greedy_search`, `beam_search`, `model_step`, `KVCache`, `CompiledDecoder`
- `annotated_transformer.figures` (attention figures): `attention_weights`, `AttentionMaps`, `plot_attention`, `plot_sentence`, `AttentionView`
- `annotated_transformer.translator` (the translator): `Translator`, `evaluate`
- `annotated_transformer.pipeline` (the training pipeline): `train_epoch` (the epoch at scale), `FusedLabelSmoothing`, `train`, and the steps it is made of
- `annotated_transformer.hub` (to and from the Hugging Face Hub): `load_pretrained`, `save_transformers`, `to_transformers`, `from_transformers`
- `annotated_transformer.engines` (serving with CTranslate2): `export_model`, `ExportedTranslator`, `is_exported`
- `annotated_transformer.parsing` (constituency parsing, §6.3): `PARSING`, `Parser`, `parse_stream`
- `annotated_transformer._chapters` (hand-written, private): what the notebooks share to run their chapters
- `annotated_transformer.cli` (hand-written): the console command `annotated-transformer`

Modules:

- `annotated_transformer.checkpoint`: What a training run saves after every epoch, as one typed record with its format's older versions read in one place; saving it atomically and loading it without running code; building the trained model and its tokenizers from it; random states for an exact resume; and checkpoint averaging (§6.1).
- `annotated_transformer.cli`: The console command `annotated-transformer`: train, evaluate, translate, export and parse. Hand-written, it parses and calls the library; most flags are fields of the records they set (`Choices`, `TrainConfig`, `RuntimeOptions`, `Search`), with their help, defaults and checks. Here is only what a command line knows: its own flags (files, folders), stdin read as it arrives, output files never overwritten, OpenMP's short spin (chapter 16), and errors in one line (`--debug`: the traceback) with an exit status: 0 done, 2 a usage error, 1 a failure the library reports, 130 interrupted (out of memory: the flag that needs less named; else an "internal error" line).
- `annotated_transformer.config`: A run's settings in one place: the named model sizes, the training configuration with every field checked by type and range, the options that are not stored, and how the settings of a run are resolved from defaults, a config file, command-line flags and, on a resume, its checkpoint.
- `annotated_transformer.data`: Multi30k from the raw files (download, cache and verify) or your own line-aligned files; corpora, where pairs of sequences come from, behind one small interface; tokenizers for words; vocabularies; sentences as ids.
- `annotated_transformer.decoding`: Section 6.1 of "Attention Is All You Need": greedy decoding, why it is not enough, the length penalty and beam search, each written to be read and checked.
- `annotated_transformer.engines`: The trained model written as a CTranslate2 model folder (with int8 weights if asked), served by the same command line and Python interface as ours, and the two engines measured against each other; then written as ONNX graphs that run the model in a web page.
- `annotated_transformer.fast_decoding`: The searches of §6.1 made fast: the model run one position at a time over a cache of keys and values, many sentences and their beams decoded together, and a cache of fixed size that `torch.compile` compiles once; the settings of a search, one table of strategies, and what any translator offers.
- `annotated_transformer.figures`: The drawing code behind [What the model attends to](08_attention.ipynb): heatmaps sized for the page, a figure that shows itself without pyplot, and the self-contained HTML view.
- `annotated_transformer.hub`: Our models written as Marian or Pegasus models that `transformers` loads, exactly, with their tokenizer and a model card; and the Hub's OPUS-MT models read into our own model, translated with our searches and drawn with our attention maps (offline, a random look-alike stands in).
- `annotated_transformer.parsing`: The paper's last experiment: the Transformer trained to turn English sentences into their constituency trees, [written as sequences](11_trees.ipynb) and scored as the field scores parsers; and compared, at a CPU's scale, with the attentional LSTM of the recurrent chapter and a right-branching baseline.
- `annotated_transformer.pipeline`: The engine behind the training chapters of Part I: the epoch at scale, the label-smoothed loss without its log-probabilities, and the trainer's steps from sentence pairs to a checkpoint per epoch.
- `annotated_transformer.runs`: A training run's folder: one writer at a time, no run replaced before its successor can start, no file written through a link, and files written so that an interruption never leaves a half-written one behind, nor debris that the next start does not clean.
- `annotated_transformer.translation`: Text in, text out: what a tokenizer does, and BLEU, the paper's score, defined and computed by hand once, then as the field reports it.
- `annotated_transformer.translator`: A trained model in use: `Translator` holds the model with its vocabularies and tokenizers, translates sentences in batches with the fast searches, returns what the model attends to, and evaluates it on a test set.
- `annotated_transformer.trees`: The Penn Treebank sample read and cleaned, each tree written as a sequence a translation model can learn and read back into a tree whatever it writes, and scored as the field scores parsers (EVALB).
- `annotated_transformer.visualization`: Attention heatmaps of a trained model for every kind of attention, what its heads do, measured over the validation set, and an interactive view in which pointing at a token shows what it attends to."""

__version__ = "0.3.0"

# The front of the package: `from annotated_transformer import make_model, Translator, train`.
# Each name is imported from its module on first use (PEP 562), so `import annotated_transformer`
# stays as fast as before and loads no PyTorch.
_HOMES = {
    "model": ["make_model", "ModelConfig", "EncoderDecoder", "subsequent_mask", "attention"],
    "batching": ["Batch"],
    "training": ["run_epoch", "rate", "noam_optimizer"],
    "losses": ["LabelSmoothing"],
    "decoding": ["greedy_decode", "beam_decode"],
    "fast_decoding": ["Search", "greedy_search", "beam_search"],
    "config": ["PRESETS", "preset", "TrainConfig", "RuntimeOptions"],
    "trees": ["Treebank", "evalb"],
    "data": ["Corpus", "Multi30k", "ParallelFiles", "InMemory", "open_corpus"],
    "checkpoint": ["load_checkpoint", "average_last"],
    "translation": ["bleu"],
    "translator": ["Translator", "evaluate"],
    "parsing": ["Parser"],
    "engines": ["export_model", "ExportedTranslator", "load_translator"],
    "pipeline": ["train"],
    "figures": ["plot_attention", "AttentionView"],
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    "A front name, imported from its module on first use (and then kept)."
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'annotated_transformer' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

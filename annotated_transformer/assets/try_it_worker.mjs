// The "Try it" panel's model (TryIt, nbs/18_figures.ipynb), in a module Web Worker so that the page
// stays responsive: onnxruntime-web (WebAssembly, one thread) runs the graphs that
// `export --format onnx` wrote into model/, @huggingface/tokenizers reads its tokenizer.json.
// In:  {type: "load"}, then {type: "translate", id, text} or {type: "tokenize", id, texts}.
// Out: {type: "progress", line}, {type: "ready", ms}, {type: "error", id?, message},
//      {type: "translated", id, ...} and {type: "tokenized", id, ids}.
const here = new URL("./", import.meta.url);  // live/: the runtime, the tokenizer, model/
let ort, tokenizer, settings, encoder, decoder;

const post = message => self.postMessage(message);

async function fetched(name, what) {  // a file of live/, with a progress line as it arrives
  try {
    return await download(name, what);
  } catch (error) {
    throw new Error(`${name}: ${error.message}`);  // the file named, whatever went wrong
  }
}

async function download(name, what) {
  const response = await fetch(new URL(name, here));
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const total = Number(response.headers.get("content-length")) || 0;
  const reader = response.body.getReader(), chunks = [];
  let loaded = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    chunks.push(value);
    loaded += value.length;
    const share = total ? ` ${Math.round(100 * loaded / total)}%` : "";
    post({type: "progress", line: `Loading ${what}${share}`});
  }
  const bytes = new Uint8Array(loaded);
  chunks.reduce((at, chunk) => (bytes.set(chunk, at), at + chunk.length), 0);
  return bytes;
}

async function load() {
  const started = performance.now();
  post({type: "progress", line: "Loading the runtime"});
  ort = await import(new URL("ort.wasm.bundle.min.mjs", here).href);
  ort.env.wasm.numThreads = 1;  // one thread: no SharedArrayBuffer, no special headers
  ort.env.wasm.proxy = false;  // this is already a worker
  ort.env.wasm.wasmPaths = {wasm: new URL("ort-wasm-simd-threaded.wasm", here).href};
  const {Tokenizer} = await import(new URL("tokenizers.min.mjs", here).href);
  const text = async name => JSON.parse(new TextDecoder().decode(await fetched(name, name)));
  settings = await text("model/config.json");
  const tokens = await text("model/tokenizer.json");
  tokenizer = new Tokenizer(tokens, {clean_up_tokenization_spaces: false});
  const options = {executionProviders: ["wasm"], graphOptimizationLevel: "all"};
  const session = async (name, what) => ort.InferenceSession.create(await fetched(name, what), options);
  encoder = await session("model/encoder.onnx", "the encoder");
  decoder = await session("model/decoder.onnx", "the decoder");
  post({type: "ready", ms: performance.now() - started, settings});
}

// The ids the encoder reads, as the library's subword tokenizer writes them: <s>, the pieces, </s>;
// a "▁" typed in the text (sentencepiece's space mark) becomes its three byte pieces.
function sourceIds(text) {
  const encode = part => tokenizer.encode(part, {add_special_tokens: false}).ids;
  const parts = text.split("▁").map(encode);
  const pieces = parts.flatMap((ids, i) => (i ? [...settings.literal_mark, ...ids] : ids));
  return [settings.bos, ...pieces, settings.eos];
}

const ids64 = ids => new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]);
const argmax = values => values.reduce((best, v, i) => (v > values[best] ? i : best), 0);

// The book's greedy_decode, with the library's limits (greedy_search): <unk> and the like are
// never written, and an output has at most the source's length + max_extra tokens.
async function greedy(src) {
  const srcMask = new ort.Tensor("bool", new Uint8Array(src.length).fill(1), [1, 1, src.length]);
  const {memory, encoder_attention} = await encoder.run({src: ids64(src), src_mask: srcMask});
  const ys = [settings.bos];
  let step;
  for (let t = 1; t < src.length + settings.max_extra; t++) {
    step = await decoder.run({memory, src_mask: srcMask, tgt: ids64(ys)});
    const logp = step.log_probs.data;  // (1, V): the next token's log-probabilities
    for (const banned of settings.banned) logp[banned] = -Infinity;
    ys.push(argmax(logp));
    if (ys[ys.length - 1] === settings.eos) break;
  }
  if (ys[ys.length - 1] !== settings.eos)  // stopped by the limit: the maps of the whole output
    step = await decoder.run({memory, src_mask: srcMask, tgt: ids64(ys)});
  const weights = {encoder: encoder_attention, decoder_self: step.decoder_self_attention,
                   decoder_src: step.decoder_src_attention};  // (N, h, queries, keys) each
  return {out: ys.slice(1), weights};
}

async function translate({id, text}) {
  const started = performance.now();
  const src = sourceIds(text);
  const longest = settings.max_len - settings.max_extra - 2;
  if (src.length - 2 > longest)
    throw new Error(`${src.length - 2} tokens: this model reads at most ${longest}`);
  const {out, weights} = await greedy(src);
  const body = out[out.length - 1] === settings.eos ? out.slice(0, -1) : out;
  const plain = {};
  for (const [kind, w] of Object.entries(weights)) plain[kind] = {dims: w.dims, data: w.data};
  post({type: "translated", id, src, out, weights: plain, ms: performance.now() - started,
        srcTokens: src.map(i => tokenizer.id_to_token(i)),
        tgtTokens: [settings.bos, ...body].map(i => tokenizer.id_to_token(i)),
        text: body.length ? tokenizer.decode(body) : ""});  // decode([]) throws
}

self.onmessage = async ({data}) => {
  try {
    if (data.type === "load") await load();
    if (data.type === "translate") await translate(data);
    if (data.type === "tokenize")
      post({type: "tokenized", id: data.id, ids: data.texts.map(sourceIds)});
  } catch (error) {
    post({type: "error", id: data.id, message: String(error && error.message || error)});
  }
};

// The "Try it" panel (TryIt, nbs/18_figures.ipynb): the reader's sentence translated by the model
// in this page, and its attention drawn by the interactive view (attention_view.js). Nothing is
// downloaded until the reader presses Translate; the model then loads in a Web Worker (worker.mjs,
// in the folder `data-base` names), saying how far it has got. Where it cannot run (a page opened
// from a file, a browser without WebAssembly SIMD, a file that does not load) the panel says why
// in one line. `panel.tryIt` is what the browser test drives: load(), run(text) (no display),
// translate(text) and tokenize(texts).
(function () {
  const panel = document.currentScript.closest(".try-it");
  const part = name => panel.querySelector(".ti-" + name);
  const view = panel.querySelector(".attention-view");
  const data = {decimals: 2, sentences: []};  // the view's data (view_data's layout), filled later
  const pending = new Map();
  let worker = null, ready = null, draw = null, asked = 0;
  const say = line => { part("status").textContent = line; };

  // The smallest module using a WebAssembly SIMD instruction, as onnxruntime-web checks for it
  const SIMD = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 10, 30,
    1, 28, 0, 65, 0, 253, 15, 253, 12, ...new Array(16).fill(0), 253, 186, 1, 26, 11]);
  function problem() {  // why the model cannot run here, or null
    if (location.protocol === "file:")
      return "The model runs only in a page served over http: in the book's folder run " +
             "`python -m http.server -b 127.0.0.1 8000` and open http://127.0.0.1:8000/" +
             location.pathname.split("/").pop() + "#try-it.";
    if (typeof WebAssembly !== "object" || !WebAssembly.validate(SIMD))
      return "This browser lacks WebAssembly SIMD, which the model's runtime needs.";
    if (typeof Worker !== "function") return "This browser has no Web Workers to run the model in.";
    return null;
  }

  function start() {  // the worker, loading the model: a promise of the model's settings
    const folder = new URL(panel.dataset.base, location.href);
    worker = new Worker(new URL("worker.mjs", folder), {type: "module"});
    return new Promise((resolve, reject) => {
      const fail = line => {
        worker.terminate();
        worker = ready = null;  // the next Translate starts again
        reject(new Error(line));
      };
      worker.onerror = event => {
        event.preventDefault();
        fail("The model's worker did not start: " + (event.message || "worker.mjs did not load"));
      };
      worker.onmessage = ({data: m}) => {
        if (m.type === "progress") say(m.line + " …");
        else if (m.type === "ready") resolve(m);
        else if (m.type === "error" && m.id === undefined)
          fail("The model did not load: " + m.message);
        else if (pending.has(m.id)) {
          const {resolve, reject} = pending.get(m.id);
          pending.delete(m.id);
          m.type === "error" ? reject(new Error(m.message)) : resolve(m);
        }
      };
      worker.postMessage({type: "load"});
    });
  }

  function ask(message) {  // a request to the loaded worker, answered by its id
    const id = ++asked;
    return new Promise((resolve, reject) => {
      pending.set(id, {resolve, reject});
      worker.postMessage({...message, id});
    });
  }

  function menus({N, h}) {  // the layers and heads of this model, then the view itself
    const numbers = (select, n) => {
      select.innerHTML = [...Array(n).keys()].map(i => `<option>${i}</option>`).join("");
    };
    numbers(view.querySelector(".av-layer"), N);
    numbers(view.querySelector(".av-head"), h);
    draw = attentionView(view, data);
  }

  function load() {  // the model, loaded once: a promise of {ms, settings}
    const why = problem();
    if (why) return Promise.reject(new Error(why));
    ready = ready || start().then(m => { menus(m.settings); return m; });
    return ready;
  }

  function nested({dims: [N, h, Q, K], data: w}) {  // (N, h, Q, K) as nested rows of 10^decimals
    const scale = 10 ** data.decimals, range = n => [...Array(n).keys()];
    return range(N).map(n => range(h).map(k => range(Q).map(q => {
      const row = ((n * h + k) * Q + q) * K;
      return Array.from(w.subarray(row, row + K), v => Math.round(v * scale));
    })));
  }

  function show(text, result) {  // the translation, and its attention as the view's newest sentence
    const src = result.srcTokens, tgt = result.tgtTokens, w = result.weights;
    data.sentences.push({kinds: {
      encoder: {rows: src, cols: src, weights: nested(w.encoder)},
      decoder_self: {rows: tgt, cols: tgt, weights: nested(w.decoder_self)},
      decoder_src: {rows: tgt, cols: src, weights: nested(w.decoder_src)},
    }});
    const sentence = view.querySelector(".av-sentence");
    sentence.add(new Option(text, data.sentences.length - 1));
    sentence.value = data.sentences.length - 1;
    part("out").textContent = result.text || "(an empty translation)";
    view.hidden = false;
    draw();
  }

  async function run(text) {  // the translation, not shown; `roundTrip`: ms from asking to answer
    await load();
    const started = performance.now();
    const result = await ask({type: "translate", text});
    result.roundTrip = performance.now() - started;
    return result;
  }

  async function translate(text) {  // the translation, shown with its attention
    const result = await run(text), {ms} = await ready;
    show(text, result);
    const took = Math.round(result.roundTrip);
    say(`Loaded in ${(ms / 1000).toFixed(1)} s; translated in ${took} ms, in this page.`);
    return result;
  }

  async function tokenize(texts) {
    await load();
    return (await ask({type: "tokenize", texts})).ids;
  }

  panel.tryIt = {load, run, translate, tokenize};
  part("form").addEventListener("submit", event => {
    event.preventDefault();
    const text = part("text").value;
    if (!text.trim()) return say("Type a German sentence first.");
    translate(text).catch(error => say(String(error.message || error)));
  });
  say(problem() || "The model (under 30 MB) downloads when you press Translate, not before.");
})();

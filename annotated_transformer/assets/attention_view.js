// The interactive attention view (AttentionView, nbs/08_attention.ipynb).
// `attentionView(view, data)` draws the view element `view` from `data` (view_data's layout) and
// returns its `draw`; a view written with its data (the JSON beside the script) draws itself. The
// "Try it" panel draws its own view from the live model, adding sentences to `data` as they are
// translated. A token shows its weights when pointed at or focused: Tab moves from token to token,
// the arrow keys along a column.
window.attentionView = function (view, data) {
  const [sentence, kind, layer, head] = ["sentence", "kind", "layer", "head"].map(n => view.querySelector(".av-" + n));
  const columns = {query: view.querySelector(".av-queries"), key: view.querySelector(".av-keys")};
  const chosen = () => data.sentences[sentence.value].kinds[kind.value];
  const weight = (i, j) => chosen().weights[layer.value][head.value][i][j] / 10 ** data.decimals;  // query i, key j

  function show(side, index) {  // shade the other column by the weights from (a query) or to (a key) this token
    const other = side === "query" ? "key" : "query";
    [...columns[side].querySelectorAll(".av-token")].forEach((t, i) => t.classList.toggle("av-focus", i === index));
    [...columns[other].querySelectorAll(".av-token")].forEach((t, i) => {
      const w = index === null ? null : side === "query" ? weight(index, i) : weight(i, index);
      t.style.background = w === null ? "" : `rgba(42, 93, 176, ${0.1 + 0.9 * w})`;
      t.style.color = w !== null && w > 0.5 ? "#fff" : "";
      t.querySelector(".av-weight").textContent = w === null ? "" : w.toFixed(data.decimals);
    });
  }
  function move(side, i, step, event) {  // arrow keys: the next token of the column
    const tokens = columns[side].querySelectorAll(".av-token");
    const next = tokens[Math.min(Math.max(i + step, 0), tokens.length - 1)];
    if (next) { next.focus(); event.preventDefault(); }
  }
  function fill(side, tokens) {
    const title = `<div class="av-title">${side === "query" ? "queries (rows)" : "keys (columns)"}</div>`;
    columns[side].innerHTML = title;
    tokens.forEach((token, i) => {
      const t = document.createElement("div");
      t.className = "av-token";
      t.tabIndex = 0;
      t.dataset.index = i;
      t.innerHTML = '<span class="av-text"></span><span class="av-weight"></span>';
      t.querySelector(".av-text").textContent = token;
      t.setAttribute("aria-label", `${side} ${i}: ${token}`);
      for (const on of ["mouseenter", "focus"]) t.addEventListener(on, () => show(side, i));
      for (const off of ["mouseleave", "blur"]) t.addEventListener(off, () => show(side, null));
      t.addEventListener("keydown", e => {
        if (e.key === "ArrowDown") move(side, i, 1, e);
        if (e.key === "ArrowUp") move(side, i, -1, e);
      });
      columns[side].appendChild(t);
    });
  }
  function draw() {
    fill("query", chosen().rows);
    fill("key", chosen().cols);
  }
  [sentence, kind, layer, head].forEach(select => select.addEventListener("change", draw));
  if (data.sentences.length) draw();
  return draw;
};
(function () {
  const view = document.currentScript && document.currentScript.closest(".attention-view");
  const json = view && view.querySelector(".av-data");
  if (json) attentionView(view, JSON.parse(json.textContent));
})();

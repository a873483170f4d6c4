// The interactive attention view (AttentionView, nbs/08_attention.ipynb): one view per call,
// found from the script element that runs it; its data is the JSON beside it.
(function () {
  const view = document.currentScript.closest(".attention-view");
  const data = JSON.parse(view.querySelector(".av-data").textContent);
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
  function fill(side, tokens) {
    const title = `<div class="av-title">${side === "query" ? "queries (rows)" : "keys (columns)"}</div>`;
    columns[side].innerHTML = title;
    tokens.forEach((token, i) => {
      const t = document.createElement("div");
      t.className = "av-token";
      t.dataset.index = i;
      t.innerHTML = '<span class="av-text"></span><span class="av-weight"></span>';
      t.querySelector(".av-text").textContent = token;
      t.addEventListener("mouseenter", () => show(side, i));
      t.addEventListener("mouseleave", () => show(side, null));
      columns[side].appendChild(t);
    });
  }
  function draw() {
    fill("query", chosen().rows);
    fill("key", chosen().cols);
  }
  [sentence, kind, layer, head].forEach(select => select.addEventListener("change", draw));
  draw();
})();

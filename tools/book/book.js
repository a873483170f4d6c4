// The book's scripts: typeset every $...$ and $$...$$ with KaTeX (bundled in katex/), mark in the
// sidebar the section being read, and say which figures scroll sideways (on a phone).
document.addEventListener("DOMContentLoaded", () => {
  renderMathInElement(document.querySelector("main"), {
    delimiters: [
      {left: "$$", right: "$$", display: true},
      {left: "$", right: "$", display: false},
      {left: "\\(", right: "\\)", display: false},
      {left: "\\[", right: "\\]", display: true},
    ],
    ignoredClasses: ["jp-OutputArea-output", "attention-view"],  // program output is text, not math
    throwOnError: false,
  });
  document.documentElement.dataset.typeset = "done";  // for the browser test: the formulas are typeset
  const links = new Map([...document.querySelectorAll(".book-toc a")].map(a => [decodeURIComponent(a.hash.slice(1)), a]));
  const observer = new IntersectionObserver(entries => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      links.forEach(a => a.classList.remove("book-current-section"));
      links.get(entry.target.id)?.classList.add("book-current-section");
    }
  }, {rootMargin: "0px 0px -80% 0px"});
  links.forEach((_, id) => { const heading = document.getElementById(id); if (heading) observer.observe(heading); });
});

// A figure, equation or table wider than the window scrolls in its own box: label the box so that a
// reader knows there is more to the right (book.css draws the label and a bar on its right edge).
const SCROLLING = [".jp-OutputArea-output", ".katex-display", ".jp-RenderedMarkdown table"]
  .map(box => "body.book " + box).join(", ");
function markScrollingBoxes() {
  for (const box of document.querySelectorAll(SCROLLING)) {
    const scrolls = box.scrollWidth > box.clientWidth + 1;
    box.classList.toggle("book-scrolls", scrolls);
    const what = box.matches(".katex-display") ? "equation"
      : box.matches("table") ? "table" : "figure";
    if (scrolls) box.dataset.hint = `scroll sideways to see the whole ${what} →`;
  }
  document.documentElement.dataset.scrollHints = "done";  // for the browser test
}
window.addEventListener("load", markScrollingBoxes);
window.addEventListener("resize", markScrollingBoxes);

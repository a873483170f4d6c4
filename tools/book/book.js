// The book's two scripts: typeset every $...$ and $$...$$ with KaTeX (bundled in katex/), and mark
// in the sidebar the section being read.
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

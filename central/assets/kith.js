// Progressive enhancement only: every page works without this file.
// "/" focuses the search box; forms with data-confirm ask first.
document.addEventListener("keydown", (e) => {
  const q = document.getElementById("q");
  if (e.key === "/" && q && document.activeElement !== q &&
      !["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName)) {
    e.preventDefault();
    q.focus();
  }
});
document.addEventListener("submit", (e) => {
  const message = e.target.dataset.confirm;
  if (message && !window.confirm(message)) e.preventDefault();
});

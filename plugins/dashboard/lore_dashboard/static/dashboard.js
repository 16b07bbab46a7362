// Progressive enhancement only: every page works without this file.
// "/" focuses the page's search or filter field (as on many sites); Escape leaves it.
"use strict";
document.addEventListener("keydown", (event) => {
  const target = event.target;
  const typing = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement ||
    target instanceof HTMLSelectElement;
  if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
    const field = document.querySelector("main input[type=search], main .filters input");
    if (field) {
      event.preventDefault();
      field.focus();
      field.select();
    }
  } else if (event.key === "Escape" && typing) {
    target.blur();
  }
});

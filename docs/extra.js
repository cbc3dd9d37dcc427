// The "Hugging Face model types" page: a search box above its tables that
// keeps the rows holding every word typed (a model type, a rope_type, a
// pairing, a reason), so that 183 supported and the refused types can be
// searched without reading the whole page. Any page whose tables start
// with a "model type" column gets it; the page itself stays generated
// Markdown (keras_posenc/_hf/architectures.py).
function addModelTypeFilter() {
  const tables = Array.from(document.querySelectorAll("article table")).filter(
    (table) => {
      const first = table.querySelector("thead th");
      return first !== null && first.textContent.trim() === "model type";
    },
  );
  if (tables.length === 0 || document.getElementById("model-type-filter")) {
    return;
  }
  const input = document.createElement("input");
  input.id = "model-type-filter";
  input.type = "search";
  input.placeholder = "Filter the model types: qwen, yarn, interleaved, refused reason…";
  input.setAttribute("aria-label", "Filter the model types");
  const count = document.createElement("p");
  const heading = document.querySelector("article h2");
  heading.before(input, count);
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const table of tables) {
      for (const row of table.tBodies[0].rows) {
        const text = row.textContent.toLowerCase();
        row.hidden = !words.every((word) => text.includes(word));
        shown += row.hidden ? 0 : 1;
      }
    }
    const rows = shown === 1 ? "row matches" : "rows match";
    count.textContent = words.length ? `${shown} ${rows}.` : "";
  });
}

// Material's instant navigation announces each page on document$.
if (typeof document$ !== "undefined") {
  document$.subscribe(addModelTypeFilter);
} else {
  document.addEventListener("DOMContentLoaded", addModelTypeFilter);
}

// What is wrong with the layout of the page as it is drawn now, as a list of sentences (none: all
// is well). tests/portal/test_layout_browser.py evaluates it after setting each width. Four faults:
//
// 1. The page is wider than the window: it scrolls sideways.
// 2. An element sticks out of its container: the nearest card, the page's header or <main>, unless
//    a box between them scrolls it (a table's wrapper with overflow-x:auto), which is the cure. A
//    card, <main> or the page that scrolls sideways itself is a fault too.
// 3. Log out is out of the window (an admin's navigation once pushed it past the right edge).
// 4. A word broken inside a table cell ("visio|n", "Approve|d"): each run of letters and digits in
//    a cell is measured with a Range; its rectangles on more than one line mean the browser broke
//    it (overflow-wrap:anywhere, word-break:break-all, or a column squeezed below its longest word).
//    Breaks at punctuation (a hyphen, a slash, a dot) are where long names may wrap, so they split
//    runs and are never counted.
() => {
  const findings = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    findings.push(`the page is ${root.scrollWidth} px wide in a ${root.clientWidth} px window`);
  }

  const logOut = document.querySelector("form[action$='/logout/'] button");
  if (logOut) {
    const box = logOut.getBoundingClientRect();
    if (box.left < 0 || box.right > root.clientWidth) { findings.push(`Log out is out of the window, at ${Math.round(box.left)} px`); }
  }

  const describe = (element) => {
    let text = element.tagName.toLowerCase();
    if (element.id) { text += `#${element.id}`; }
    const classes = [...element.classList].filter((name) => !name.startsWith("htmx-"));
    if (classes.length) { text += `.${classes.join(".")}`; }
    const testid = element.getAttribute("data-testid");
    if (testid) { text += `[data-testid=${testid}]`; }
    const words = (element.innerText || element.textContent || "").trim().replace(/\s+/g, " ");
    return words ? `${text} "${words.slice(0, 40)}"` : text;
  };
  const styles = new Map();  // one getComputedStyle per element and width: the walk up asks for the same ancestors again
  const style = (element) => {
    if (!styles.has(element)) { styles.set(element, getComputedStyle(element)); }
    return styles.get(element);
  };
  const scrolls = (element) => style(element).overflowX !== "visible";
  const isContainer = (element) => element.matches(".card, main, header, body");
  const containerOf = (element) => {
    let parent = element.parentElement;
    while (parent && !isContainer(parent) && !scrolls(parent)) { parent = parent.parentElement; }
    return parent;
  };

  for (const container of document.querySelectorAll(".card, main")) {
    if (scrolls(container) && container.scrollWidth > container.clientWidth + 1) {
      findings.push(`${describe(container)} scrolls sideways: ${container.scrollWidth} px of content in ${container.clientWidth} px`);
    }
  }
  const sticking = new Set();
  for (const element of document.body.querySelectorAll("*")) {
    const own = style(element);
    if (own.position === "fixed" || own.visibility === "hidden" || element.closest("svg") && element.tagName !== "svg") { continue; }
    const box = element.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) { continue; }
    const container = containerOf(element);
    if (!container || !isContainer(container)) { continue; }
    const outer = container.getBoundingClientRect();
    const right = Math.round(box.right - outer.right), left = Math.round(outer.left - box.left);
    if (right <= 1 && left <= 1) { continue; }
    sticking.add(element);
    if (sticking.has(element.parentElement)) { continue; }  // its parent sticks out already: say it once
    const side = right > 1 ? `${right} px past the right` : `${left} px past the left`;
    findings.push(`${describe(element)} sticks out of ${describe(container).slice(0, 60)}: ${side}`);
  }

  for (const cell of document.querySelectorAll("td, th")) {
    if (!cell.getClientRects().length) { continue; }
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const whole = document.createRange();
      whole.selectNodeContents(node);
      if (new Set([...whole.getClientRects()].map((r) => Math.round(r.top))).size < 2) { continue; }  // on one line: nothing broken
      for (const word of node.data.matchAll(/[\p{L}\p{N}]{2,}/gu)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (lines.size < 2) { continue; }
        let shown = "", previousTop = null;
        for (let i = 0; i < word[0].length; i++) {
          range.setStart(node, word.index + i);
          range.setEnd(node, word.index + i + 1);
          const top = Math.round(range.getBoundingClientRect().top);
          if (previousTop !== null && top !== previousTop) { shown += "|"; }
          shown += word[0][i];
          previousTop = top;
        }
        findings.push(`a word is broken in ${describe(cell).slice(0, 80)}: "${shown}"`);
      }
    }
  }
  return findings;
}

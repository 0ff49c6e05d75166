// Markdown to DOM, safely: model output only ever becomes text nodes and a fixed set of
// elements built here (no innerHTML, no attributes from the text but an http(s) link's
// href), so nothing in it can run script or load anything. The subset: fenced code blocks,
// headings, lists, block quotes, paragraphs; inline code, bold, italic, links. An unclosed
// fence (a stream still arriving) runs to the end as code.

const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*)$/;
const ITEM = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
const QUOTE = /^>\s?(.*)$/;
const INLINE = /(`+)([\s\S]*?)\1|\*\*([\s\S]+?)\*\*|(?<![\w*])\*(?!\s)([^*\n]+?)\*(?![\w*])|(?<!\w)_(?!\s)([^_\n]+?)_(?!\w)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g;

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

/** Appends the inline markup of `text` to `parent`. */
function inline(parent, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    if (m[1] !== undefined) {
      const c = el("code");
      c.textContent = m[2];
      parent.append(c);
    } else if (m[3] !== undefined) {
      const b = el("strong");
      inline(b, m[3]);
      parent.append(b);
    } else if (m[4] !== undefined || m[5] !== undefined) {
      const i = el("em");
      inline(i, m[4] ?? m[5]);
      parent.append(i);
    } else {
      const a = el("a");
      a.textContent = m[6];
      a.href = m[7];
      a.rel = "noopener noreferrer nofollow";
      a.target = "_blank";
      parent.append(a);
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(text.slice(last));
}

function paragraph(lines) {
  const p = el("p");
  lines.forEach((l, i) => {
    if (i > 0) p.append(el("br"));
    inline(p, l);
  });
  return p;
}

/** `text` as a fragment of safe elements. */
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const lines = text.split("\n");
  let para = [];
  const flush = () => {
    if (para.length) out.append(paragraph(para));
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const code = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(fence[1]) && lines[i].trim().replace(/[`~]/g, "") === "")) {
        code.push(lines[i]);
        i++;
      }
      const pre = el("pre", "code");
      if (fence[2]) {
        const lang = el("span", "lang");
        lang.textContent = fence[2];
        pre.append(lang);
      }
      const c = el("code");
      c.textContent = code.join("\n");
      pre.append(c);
      out.append(pre);
      continue;
    }
    const h = line.match(HEADING);
    if (h) {
      flush();
      const e = el("h" + Math.min(6, h[1].length + 2));
      inline(e, h[2]);
      out.append(e);
      continue;
    }
    if (ITEM.test(line)) {
      flush();
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length && ITEM.test(lines[i])) {
        const li = el("li");
        inline(li, lines[i].match(ITEM)[2]);
        list.append(li);
        i++;
      }
      i--;
      out.append(list);
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const q = el("blockquote");
      const quoted = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        quoted.push(lines[i].match(QUOTE)[1]);
        i++;
      }
      i--;
      q.append(paragraph(quoted));
      out.append(q);
      continue;
    }
    if (line.trim() === "") {
      flush();
      continue;
    }
    para.push(line);
  }
  flush();
  return out;
}

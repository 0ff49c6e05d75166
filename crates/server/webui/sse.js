// Server-sent events read from a fetch response (so that requests can carry the API key in
// a header, which EventSource cannot).

/** The `data:` objects of `response`'s events, parsed; ends at the body's end or `[DONE]`. */
export async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const data = buf.slice(0, end).split("\n").filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trim()).join("");
      buf = buf.slice(end + 2);
      if (data === "[DONE]") return;
      if (data) yield JSON.parse(data);
    }
  }
}

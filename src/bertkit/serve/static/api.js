// The API reference, drawn from the server's own OpenAPI schema (no CDN, no build step).
"use strict";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function resolve(schema, spec) {  // follow a local $ref ("#/components/schemas/Name")
  while (schema && schema.$ref) {
    schema = schema.$ref.split("/").slice(1).reduce((node, key) => node[key], spec);
  }
  return schema || {};
}

function typeOf(schema, spec) {
  schema = resolve(schema, spec);
  if (schema.anyOf) return schema.anyOf.map((s) => typeOf(s, spec)).join(" | ");
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.type === "array") return `${typeOf(schema.items, spec)}[]`;
  return schema.type || "object";
}

function fields(schema, spec) {
  schema = resolve(schema, spec);
  const required = new Set(schema.required || []);
  const rows = Object.entries(schema.properties || {}).map(([name, prop]) => {
    const p = resolve(prop, spec);
    const dflt = p.default === undefined ? "" : ` (default ${JSON.stringify(p.default)})`;
    return el("tr", {}, el("td", {}, el("code", {}, name), required.has(name) ? " *" : ""),
      el("td", {}, typeOf(prop, spec)), el("td", {}, (p.description || "") + dflt));
  });
  if (!rows.length) return el("p", { class: "muted" }, "no body");
  return el("table", { class: "fields" },
    el("tr", {}, el("th", {}, "field"), el("th", {}, "type"), el("th", {}, "meaning")), ...rows);
}

async function main() {
  const spec = await (await fetch("/openapi.json")).json();
  const out = document.getElementById("api");
  out.replaceChildren(el("p", {}, spec.info.description || ""));
  for (const [path, methods] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(methods)) {
      const body = op.requestBody && op.requestBody.content["application/json"];
      out.append(el("section", { class: "endpoint", id: `${method}-${path}` },
        el("h2", {}, el("code", {}, `${method.toUpperCase()} ${path}`)),
        body ? fields(body.schema, spec) : el("p", { class: "muted" }, "no body"),
        el("pre", {}, `curl -s localhost:8080${path}` + (body
          ? ` -H 'Content-Type: application/json' -d '{...}'` : ""))));
    }
  }
}

main().catch((err) => {
  document.getElementById("api").textContent = `could not load /openapi.json: ${err.message}`;
});

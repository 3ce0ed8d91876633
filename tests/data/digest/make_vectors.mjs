// Regenerates vectors.json: the arguments digest as JavaScript computes it (RFC 8785 order,
// JSON.stringify's numbers and escapes). Run with `node make_vectors.mjs > vectors.json`.
import { createHash } from "node:crypto";

function canonical(value) {
  if (Array.isArray(value)) return "[" + value.map(canonical).join(",") + "]";
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort(); // sorts by UTF-16 code units
    return "{" + keys.map((k) => JSON.stringify(k) + ":" + canonical(value[k])).join(",") + "}";
  }
  return JSON.stringify(value);
}

// Each input is written as JSON text so lone surrogates and exact numbers survive the file.
const inputs = [
  "{}",
  '{"to":"a@example.com","amount":12.5,"currency":"EUR"}',
  '{"b":1.0,"a":1e21,"c":5e-7,"d":-0,"e":123456789012345680000,"f":0.1}',
  '{"\\ue000":1,"\\ud83d\\ude00":2,"z":3,"A":4,"é":5}',
  '{"lone":"\\ud800x","pair":"\\ud83d\\ude00","ctl":"\\u0000\\u001f\\n\\t\\"\\\\/","bidi":"\\u202e"}',
  '{"nested":{"y":[3,{"b":null,"a":true}],"x":false},"list":[[],{}]}',
  '{"html":"<script>alert(1)</script>&amp;","big":9007199254740993}',
];
const vectors = inputs.map((text) => {
  const canon = canonical(JSON.parse(text));
  const digest = "sha256:" + createHash("sha256").update(canon, "utf8").digest("hex");
  return { input: text, canonical: canon, digest };
});
console.log(JSON.stringify({ generator: "node " + process.version, vectors }, null, 2));

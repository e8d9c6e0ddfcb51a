// Writes pieces.json: how JavaScript's own regex engine (Unicode mode: \p{L}, \p{N}) splits each
// text by the pre-tokenizer patterns of Llama 3's and Qwen2's tokenizer.json — the oracle
// test_tokenizer holds ICU's splits to. Run: node pieces.js > pieces.json
const patterns = {
  llama3: String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  qwen2: String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
};
const texts = [
  "Hello, world! How are you?",
  "I'M SURE THEY'LL say it's what we've done; you'd've",
  "numbers 1234567 and 3.14159, 1,000,000",
  "line one\nline two\n\n  indented\r\n\tTabbed",
  "café naïve Zürich — Ελληνικά и русский",
  "日本語のテキストと中文文本 emoji 😀🎉👍🏽",
  "x=(a+b)*c; // comment!!!\n",
  "  leading and trailing   ",
];
// (?i:…) is a modifier group JavaScript gained only lately: spell its alternatives out for it
const js = (p) => new RegExp(p.replace(String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)`,
  String.raw`'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]`), "gu");
const out = {patterns, cases: []};
for (const text of texts) {
  const c = {text};
  for (const [name, p] of Object.entries(patterns)) c[name] = text.match(js(p));
  out.cases.push(c);
}
const lines = out.cases.map((c) => "  " + JSON.stringify(c));
process.stdout.write('{\n "patterns": ' + JSON.stringify(patterns) + ',\n "cases": [\n' + lines.join(",\n") +
                     "\n ]\n}\n");

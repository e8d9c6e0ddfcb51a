// Writes the fixture: each text with the ids gpt-3-encoder gives it (GPT-2's own encoder, in JS).
const {encode, decode} = require('gpt-3-encoder');
const texts = [
  "Hello world",
  "Hello, world! How are you?",
  "  leading spaces and trailing spaces   ",
  "line one\nline two\n\nline four\n",
  "tabs\tand\t\tmore tabs",
  "I'm sure they'll say it's what we've done; you'd've, 'd",
  "DON'T SHOUT, it's rude",
  "numbers 1234567890 and 3.14159, 1,000,000",
  "café naïve résumé Zürich São Paulo",
  "Ελληνικά και русский текст",
  "日本語のテキストと中文文本",
  "emoji 😀🎉👍🏽 and ❤️ hearts",
  "punctuation!!! ??? ... --- ((()))",
  "mixed123abc ABC123 a1b2c3",
  "Alice was beginning to get very tired of sitting by her sister on the bank.",
  "    indented code:\n        return x + 1  # comment\n",
  "x",
  " ",
  "\n\n\n",
  "a  b   c    d",
  "https://example.com/path?query=1&b=2",
  "résumé's café-au-lait",
];
// one case a line
const cases = texts.map(t => "  " + JSON.stringify({text: t, ids: encode(t)}));
const source = "gpt-3-encoder 1.1.4 (npm), GPT-2's vocabulary and BPE in JavaScript";
process.stdout.write('{\n "source": ' + JSON.stringify(source) + ',\n "cases": [\n' + cases.join(",\n") + "\n ]\n}\n");
for (const t of texts) if (decode(encode(t)) !== t) throw new Error("round trip " + t);

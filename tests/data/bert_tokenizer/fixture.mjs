// Writes the fixture: each text with the ids and the decoded text that transformers.js — Hugging
// Face's tokenizers ported to JavaScript — gives it with bert-base-uncased's tokenizer.json.
//   npm install @xenova/transformers@2.17.2 --ignore-scripts   (in a scratch folder, NODE_PATH to it)
//   node fixture.mjs > fixture.json
// The texts keep to where transformers.js follows the Rust library: accents of U+0300–U+036F
// (it strips no other marks: not the kana voicing mark of "で", U+3099), CJK in the Basic
// Multilingual Plane, no final sigma.
import {createRequire} from 'module';
const require = createRequire(import.meta.url);
const {PreTrainedTokenizer} = await import(require.resolve('@xenova/transformers/src/tokenizers.js'));
const {tokenizerJson} = require('./tokenizer_json.js');

const tokenizer = new PreTrainedTokenizer(tokenizerJson(), {});
const texts = [
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "Alice was beginning to get very tired of sitting by her sister on the bank.",
  "unaffable UNAFFABLE Unaffable",
  "I'm sure they'll say it's what we've done; don't.",
  "numbers 1234567890 and 3.14159, 1,000,000 $5 50% #1",
  "Café déjà vu — naïve résumé Ångström Zürich São Paulo",
  "ελληνικά και русский текст",
  "東京は日本の首都 中文文本",
  "emoji 😀🎉 and ❤️ hearts",
  "  leading and   trailing spaces   ",
  "tabs\tand\nnew\r\nlines",
  "no\u00a0break\u2003em space",
  "zero\u200bwidth and x\u0000y",
  "the [MASK] sat on the [SEP] mat[CLS]",
  "https://example.com/path?query=1&b=2",
  "a".repeat(101) + " word",
  "xqzvwk jjjjjj",
  "punctuation!!! ??? ... --- ((()))",
  "x",
  "",
  "   ",
];
const cases = texts.map(text => {
  const ids = tokenizer.encode(text);
  const decoded = tokenizer.decode(ids, {clean_up_tokenization_spaces: false});
  return '  ' + JSON.stringify({text, ids, decoded});
});
const source = "transformers.js 2.17.2 (npm @xenova/transformers), Hugging Face's tokenizers in " +
               "JavaScript, with bert-base-uncased's vocabulary (vocab.txt)";
process.stdout.write('{\n "source": ' + JSON.stringify(source) + ',\n "cases": [\n' + cases.join(',\n') +
                     '\n ]\n}\n');

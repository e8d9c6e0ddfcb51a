// Writes the fixture: each text with the ids and decoded text Llama 2's tokenizer gives it, as
// two JavaScript encoders agree: llama-tokenizer-js (npm, MIT; SentencePiece's BPE for LLaMA)
// and transformers.js (npm @xenova/transformers, Hugging Face's tokenizers ported, Apache-2.0)
// reading tokenizer.json. A text where they part is an error, not a case.
//   npm install llama-tokenizer-js@1.2.2 @xenova/transformers@2.17.2 --ignore-scripts
//   node fixture.mjs > fixture.json          (NODE_PATH to that folder's node_modules)
import fs from 'fs';
import {createRequire} from 'module';
const require = createRequire(import.meta.url);
const {default: llama} = await import(require.resolve('llama-tokenizer-js'));
const {PreTrainedTokenizer} = await import(require.resolve('@xenova/transformers/src/tokenizers.js'));

const file = JSON.parse(fs.readFileSync(new URL('tokenizer.json', import.meta.url)));
const hf = new PreTrainedTokenizer(file, {legacy: true});
const texts = [
  "Hello world!",
  "Alice was beginning to get very tired of sitting by her sister on the bank.",
  "  leading spaces and trailing spaces   ",
  "line one\nline two\n\nline four\n",
  "tabs\tand\t\tmore tabs",
  "I'm sure they'll say it's what we've done; you'd've",
  "numbers 1234567890 and 3.14159, 1,000,000",
  "café naïve résumé Zürich São Paulo",
  "Ελληνικά και русский текст",
  "日本語のテキストと中文文本",
  "emoji 😀🎉👍🏽 and ❤️ hearts",
  "rare characters: ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ᚠᛇᚻ",
  "punctuation!!! ??? ... --- ((()))",
  "https://example.com/path?query=1&b=2",
  "x",
  " ",
  "\n",
  "a  b   c    d",
];
const cases = texts.map(text => {
  const ids = llama.encode(text);
  const theirs = hf.encode(text);
  if (JSON.stringify(ids) !== JSON.stringify(theirs)) {
    throw new Error(`the encoders part on ${JSON.stringify(text)}: ${ids} / ${theirs}`);
  }
  const decoded = hf.decode(ids, {skip_special_tokens: true, clean_up_tokenization_spaces: false});
  if (decoded !== llama.decode(ids)) throw new Error(`the decoders part on ${JSON.stringify(text)}`);
  return '  ' + JSON.stringify({text, ids, decoded});
});
const source = "llama-tokenizer-js 1.2.2 and transformers.js 2.17.2 (npm), agreeing on Llama 2's tokenizer.json";
process.stdout.write('{\n "source": ' + JSON.stringify(source) + ',\n "cases": [\n' + cases.join(',\n') +
                     '\n ]\n}\n');

// Writes tokenizer.json: Llama 2's tokenizer as the hub's Llama-2-7b-hf folder has it — a BPE
// model with byte fallback over SentencePiece's vocabulary, spaces as "▁" — from the vocabulary
// and merges npm's llama-tokenizer-js (MIT) carries, in its order (a merge's place is its rank).
//   npm install llama-tokenizer-js@1.2.2   (in a scratch folder, NODE_PATH to it)
//   node tokenizer_json.mjs > tokenizer.json
import {createRequire} from 'module';
const require = createRequire(import.meta.url);
const {default: llama} = await import(require.resolve('llama-tokenizer-js'));

const vocab = {};
llama.vocabById.forEach((token, id) => { vocab[token] = id; });
const merges = [...llama.merges.entries()].sort((a, b) => a[1] - b[1]).map(([pair]) => pair);
const added = ['<unk>', '<s>', '</s>'].map((content, id) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true}));
const file = {
  version: '1.0', truncation: null, padding: null, added_tokens: added,
  normalizer: {type: 'Sequence', normalizers: [{type: 'Prepend', prepend: '▁'},
                                               {type: 'Replace', pattern: {String: ' '}, content: '▁'}]},
  pre_tokenizer: null,
  post_processor: {type: 'TemplateProcessing',
                   single: [{SpecialToken: {id: '<s>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}}],
                   pair: [{SpecialToken: {id: '<s>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
                          {SpecialToken: {id: '<s>', type_id: 1}}, {Sequence: {id: 'B', type_id: 1}}],
                   special_tokens: {'<s>': {id: '<s>', ids: [1], tokens: ['<s>']}}},
  decoder: {type: 'Sequence', decoders: [{type: 'Replace', pattern: {String: '▁'}, content: ' '},
                                         {type: 'ByteFallback'}, {type: 'Fuse'},
                                         {type: 'Strip', content: ' ', start: 1, stop: 0}]},
  model: {type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null,
          end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges},
};
process.stdout.write(JSON.stringify(file) + '\n');

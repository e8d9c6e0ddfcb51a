// bert-base-uncased's tokenizer.json, as the hub has it, around the words of vocab.txt.
const fs = require('fs');
const path = require('path');

function tokenizerJson() {
  const words = fs.readFileSync(path.join(__dirname, 'vocab.txt'), 'utf8').split('\n');
  if (words[words.length - 1] === '') words.pop();
  const vocab = {};
  words.forEach((w, i) => { vocab[w] = i; });
  const special = (id, type) => ({SpecialToken: {id, type_id: type}});
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map(content => ({
      id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: false,
      special: true})),
    normalizer: {type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null,
                 lowercase: true},
    pre_tokenizer: {type: 'BertPreTokenizer'},
    post_processor: {
      type: 'TemplateProcessing',
      single: [special('[CLS]', 0), {Sequence: {id: 'A', type_id: 0}}, special('[SEP]', 0)],
      pair: [special('[CLS]', 0), {Sequence: {id: 'A', type_id: 0}}, special('[SEP]', 0),
             {Sequence: {id: 'B', type_id: 1}}, special('[SEP]', 1)],
      special_tokens: {'[CLS]': {id: '[CLS]', ids: [vocab['[CLS]']], tokens: ['[CLS]']},
                       '[SEP]': {id: '[SEP]', ids: [vocab['[SEP]']], tokens: ['[SEP]']}}},
    decoder: {type: 'WordPiece', prefix: '##', cleanup: true},
    model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
            max_input_chars_per_word: 100, vocab},
  };
}

module.exports = {tokenizerJson};
if (require.main === module) process.stdout.write(JSON.stringify(tokenizerJson()));

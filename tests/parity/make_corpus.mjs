// Writes corpus.jsonl: the strings every tokenizer is checked on, one JSON string per line.
// All text here was written for this corpus; it is regenerated with `node make_corpus.mjs`.
import { writeFileSync } from 'node:fs';

const lines = new Set();
const add = (s) => lines.add(s);

const prose = [
  'The quick brown fox jumps over the lazy dog.',
  'A kiln turns soft clay into hard stone-like ware.',
  "It's a small world, isn't it? We'll see what they've done.",
  "I'm sure you'd like it; she'll say they're RIGHT, HE'S wrong.",
  'Rain fell all night, and by morning the river had risen two feet.',
  'To be, or not to be, that is the question.',
  'All happy families are alike; each unhappy family is unhappy in its own way.',
  'Call me Ishmael.',
  'The model reads one token at a time and predicts the next.',
  'Please summarize the following paragraph in three sentences.',
  'Mr. and Mrs. Dursley, of number four, were proud to say they were perfectly normal.',
  'She sells sea shells by the sea shore.',
  'Why? Because... well -- it depends!!!',
  '"Quoted text," he said, "ends here."',
  'e.g. i.e. etc. vs. a.m. p.m. U.S.A.',
  'CamelCaseIdentifiersLikeThisOne and snake_case_ones_too',
  'ALL CAPS SENTENCE WITH SHOUTING',
  "don't DON'T Don'T won't can't shouldn't y'all ma'am",
];
const cjk = [
  '你好，世界！今天天气很好。',
  '机器学习模型需要大量的数据来训练。',
  '我们在北京的一家咖啡馆见面，聊了三个小时。',
  'こんにちは、世界！お元気ですか？',
  '東京タワーの近くにある小さな店でラーメンを食べました。',
  'カタカナとひらがなと漢字が混ざった文章です。',
  '안녕하세요, 세계! 오늘 날씨가 좋네요.',
  '한국어 문장은 띄어쓰기를 사용합니다.',
  '繁體中文與简体中文的差別',
];
const other = [
  'مرحبا بالعالم! كيف حالك اليوم؟',
  'اللغة العربية تكتب من اليمين إلى اليسار.',
  'नमस्ते दुनिया! आप कैसे हैं?',
  'हिन्दी भाषा देवनागरी लिपि में लिखी जाती है।',
  'Привет, мир! Как дела?',
  'Съешь же ещё этих мягких французских булок, да выпей чаю.',
  'Γειά σου κόσμε! Τι κάνεις;',
  'שלום עולם! מה שלומך?',
  'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ',
  'Xin chào thế giới! Tiếng Việt có nhiều dấu.',
  'Türkçe: çok güzel, İstanbul ve ığdır.',
  'Deutsch: Größe, Straße, Äpfel, Öl, Übermut.',
  'Français : où est la bibliothèque ? Très bien, merci !',
  'Español: ¿Dónde está el baño? ¡Olé!',
  'Polski: Zażółć gęślą jaźń.',
  'ქართული ენა ლამაზია',
  'Հայերեն լեզու',
  'አማርኛ ቋንቋ',
  'தமிழ் மொழி மிகவும் பழமையானது',
  'বাংলা ভাষা সুন্দর',
];
const code = [
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  'import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)',
  'class Foo:\n\tdef __init__(self):\n\t\tself.x = 1\n',
  '#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() == 3 ? 0 : 1;\n}\n',
  'template <typename T> T max(T a, T b) { return a > b ? a : b; }',
  'for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }',
  '{"name": "kiln", "version": "0.1.0", "tags": ["llm", "cpu"], "nested": {"a": null, "b": true}}',
  '[1, 2.5, -3e10, "x\\ny", {}]',
  '#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo "$f"; done\n',
  'ls -la | grep "^d" | awk \'{print $9}\' > dirs.txt && cat dirs.txt',
  'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
  'const f = (a, b) => a ?? b; let x = obj?.prop ?? 0;',
  '<html><body><p class="x">Hello &amp; welcome</p></body></html>',
  'fn main() { let v: Vec<u8> = vec![0xFF; 16]; println!("{:?}", v); }',
  '    indented with four spaces\n        and eight\n',
  'x=1;y=2;z=x+y*3-4/5%6',
  'if(a&&b||!c){return;}else{a<<=2;b>>=1;}',
  '// comment\n/* block\n comment */\n# python comment',
];
const emoji = [
  'I love pizza 🍕 and tacos 🌮!',
  'Family: 👨‍👩‍👧‍👦 and couple: 👩‍❤️‍👨',
  'Flags: 🇺🇸 🇯🇵 🇫🇷 🇧🇷 🏳️‍🌈 🏴‍☠️',
  'Skin tones: 👍🏻 👍🏽 👍🏿 and 🧑🏾‍💻',
  'Keycaps: 1️⃣ 2️⃣ #️⃣ and ❤️ vs ❤',
  '😀😃😄😁😆😅😂🤣',
  'Math: ∑ ∫ √ ∞ ≠ ≤ ≥ ± × ÷ π',
  'Arrows → ← ↑ ↓ ⇒ and boxes ■ □ ▪ ▫',
  'Currency: $100 €50 £30 ¥1000 ₹500 ₿0.01',
  '™ ® © ° § ¶ † ‡ • … ‰',
];
const combining = [
  'e\u0301 vs \u00e9',
  'Zalgo: Z\u0351\u036b\u0343a\u0310\u0357l\u0346g\u030co\u0352',
  'n\u0303 a\u0308 o\u0302 u\u0300',
  '\u1100\u1161\u11a8 (decomposed Hangul)',
  'A\u030a ring, \u212b angstrom, \u00c5 precomposed',
  'ﬁ ligature, ① circled, ｆｕｌｌｗｉｄｔｈ, ㍻',
  'Kelvin \u212a and long s \u017f and dotless \u0131',
];
const spaces = [
  '', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n\n', ' \n ', '\t\t\tx',
  'trailing spaces   ', '   leading spaces', 'a  b   c    d     e',
  'line one\nline two\r\nline three\rline four',
  'tabs\tbetween\twords\t', 'mixed \t \n \r\n whitespace',
  'ends with newline\n', 'ends with crlf\r\n', 'many\n\n\n\nnewlines',
  '\u00a0non-breaking\u00a0space', 'ideographic\u3000space', 'thin\u2009space and em\u2003space',
  'next line\u0085char', 'zero\u200bwidth\u200bspace', 'line\u2028separator', 'word joiner\u2060here',
  ' leading single space', '  two leading', 'x ', 'x  ', ' x ',
];
const numbers = [
  '1234567890', '3.14159265358979323846', '1,234,567.89', '1.234.567,89', '1 234 567',
  '12345678901234567890123456789012345678901234567890', '-42', '+7', '0.000001', '1e-9', '6.022e23',
  '2024-01-15T10:30:00Z', '(555) 123-4567', '192.168.0.1', 'v1.2.3-rc.4', '100%', '50/50', '1/3 + 2/3 = 1',
  '٠١٢٣٤٥٦٧٨٩ Arabic-Indic digits', '०१२३ Devanagari digits', '１２３ fullwidth digits', 'Ⅻ roman numeral',
];
const urls = [
  'https://example.com/path/to/page?query=1&other=two#section',
  'Visit http://www.example.org or mail someone@example.com.',
  'ftp://files.example.net/pub/file.tar.gz',
  'C:\\Users\\name\\Documents\\file.txt', '/usr/local/bin/kiln --help', '~/.config/kiln/config.toml',
  '@user #hashtag $TICKER', 'https://example.com/%E4%BD%A0%E5%A5%BD',
];
const specials = [
  '<|begin_of_text|>Hello there', 'Hello<|end_of_text|>', '<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n',
  '<s>[INST] What is 2+2? [/INST] 4</s>', '</s><s></s>', 'text <s> in the middle', '[INST]alone[/INST]',
  '<|endoftext|>', 'a<|endoftext|>b', '<|endoftext|><|endoftext|>', '<|im_start|>', '<|im_start', 'im_start|>',
  '<think>\nreasoning\n</think>\nanswer', '<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>',
  '<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>', '<unk> token', '<<s>>', '<</s>',
  '<|endofprompt|> after', ' <s> spaced </s> ', '<|begin_of_text|><|begin_of_text|>',
];
const singles = [
  'a', 'Z', '0', '.', ',', '!', '?', "'", '"', '-', '_', '~', '`', '\\', '/', '|', '@', '#', '$', '%', '^',
  '&', '*', '(', ')', '[', ']', '{', '}', '<', '>', '=', '+', ';', ':', 'é', 'ß', '中', '語', '한', 'я',
  'ω', 'ا', 'अ', '😀', '🇺', '\u0301', '\u200d', '\ufffd', '\u0000', '\u0001', '\u001b[31mred\u001b[0m', '\u007f',
];

for (const group of [prose, cjk, other, code, emoji, combining, spaces, numbers, urls, specials, singles]) {
  for (const s of group) add(s);
}

// Variations: leading/trailing whitespace, case, contractions, joins across groups.
const variants = [...prose, ...cjk, ...other.slice(0, 10), ...emoji.slice(0, 5)];
for (const s of variants) {
  add(' ' + s);
  add(s + ' ');
  add(s + '\n');
  add('  ' + s + '\t');
  add(s.toUpperCase());
  add(s.toLowerCase());
}
for (let i = 0; i < cjk.length; ++i) add(cjk[i] + ' ' + other[i] + ' ' + prose[i]);
for (let i = 0; i < specials.length; ++i) add(prose[i % prose.length] + specials[i] + cjk[i % cjk.length]);
for (let i = 0; i < code.length; ++i) add(prose[i % prose.length] + '\n```\n' + code[i] + '```\n');

// Whitespace runs of every length before words and at the end.
for (let n = 1; n <= 17; n += 2) {
  add('x' + ' '.repeat(n) + 'y');
  add('word' + ' '.repeat(n));
  add('\n'.repeat(n) + 'z');
  add('a' + '\t'.repeat(n) + 'b');
  add(' '.repeat(n) + '\n' + ' '.repeat(n) + 'c');
}

// Digit strings of every length, plain and grouped.
for (let n = 1; n <= 24; n += 1) {
  let d = '';
  for (let i = 0; i < n; ++i) d += String((i * 7 + n) % 10);
  add(d);
  add('n=' + d + ';');
}

// Very long words and repeated text.
add('a'.repeat(1000));
add('ab'.repeat(700));
add('supercalifragilisticexpialidocious'.repeat(20));
add('🙂'.repeat(200));
add('中文'.repeat(300));
add('-'.repeat(200) + '=' .repeat(100));
add(' '.repeat(300));
add('\n'.repeat(100));
add(prose.join(' '));
add(code.join('\n'));
add([...cjk, ...other].join(''));

// Contractions in every case.
for (const c of ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D"]) {
  add('it' + c);
  add('word' + c + ' more');
  add(c);
}

// Pairs of single characters.
for (let i = 0; i + 1 < singles.length; ++i) add(singles[i] + singles[i + 1] + singles[(i * 5) % singles.length]);

// Pseudo-random mixes of fragments from every group (a fixed linear congruential sequence).
const fragments = [...prose, ...cjk, ...other, ...code, ...emoji, ...combining, ...numbers, ...urls, ...specials];
let seed = 12345;
const next = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed;
};
while (lines.size < 720) {
  const count = 2 + (next() % 3);
  let s = '';
  for (let i = 0; i < count; ++i) {
    const f = Array.from(fragments[next() % fragments.length]);  // code points, never half a pair
    const cut = next() % (f.length + 1);
    s += f.slice(0, Math.max(cut, 1)).join('');
    s += [' ', '', '\n', '  ', '\t'][next() % 5];
  }
  add(s);
}

writeFileSync(new URL('./corpus.jsonl', import.meta.url), [...lines].map((s) => JSON.stringify(s)).join('\n') + '\n');
console.log(`corpus.jsonl: ${lines.size} strings`);

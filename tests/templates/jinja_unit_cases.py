#!/usr/bin/python3
"""Prints the table of interpreter cases in tests/unit/llm/jinja/jinja_test.cpp: each template is rendered
by Python jinja2 in the transformers environment; paste the output between the markers there.

Usage: /usr/bin/python3 tests/templates/jinja_unit_cases.py"""
import json, jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters['tojson'] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m): raise jinja2.exceptions.TemplateError(m)
env.globals['raise_exception'] = raise_exception
import datetime
env.globals['strftime_now'] = lambda f: datetime.datetime.now().strftime(f)
cases = [
 # name, template, context
 ("text", "hello world", {}),
 ("variable", "{{ name }}!", {"name": "Ada"}),
 ("undefined_renders_empty", "[{{ missing }}]", {}),
 ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
 ("for_loop_vars", "{% for c in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {}),
 ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
 ("for_filter", "{% for x in range(6) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}", {}),
 ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|items %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("loop_previtem_cycle", "{% for i in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }}|{% endfor %}", {}),
 ("break_continue", "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
 ("loop_scope", "{% set x = 5 %}{% for i in [1,2] %}{{ x }}{% set x = i %}{% endfor %}[{{ x }}]", {}),
 ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for i in [1,2,3] %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }} {{ ns.found }}", {}),
 ("set_tuple_and_block", "{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set blk %}x{{ a }}y{% endset %}[{{ blk }}]", {}),
 ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') }} {{ greet('Al', punct='?') }}", {}),
 ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}),
 ("call_block", "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner{% endcall %}", {}),
 ("raw", "{% raw %}{{ not rendered }}{% endraw %}", {}),
 ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
 ("comments", "a{# a comment #}b\n  {# own line #}\nc", {}),
 ("whitespace_control", "a  {{- ' b ' -}}  c\n{%- if true %} d {% endif -%}\n e", {}),
 ("trim_lstrip_blocks", "<ul>\n  {% for i in [1, 2] %}\n  <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n", {}),
 ("lstrip_plus_disables", "x\n  {%+ if true %}y{% endif +%}\nz", {}),
 ("trailing_newline_dropped", "line\n", {}),
 ("crlf_normalised", "a\r\nb{% if true %}\r\nc{% endif %}", {}),
 ("string_escapes", "{{ 'tab\\there\\nnl \\u00e9 \\x41 \\'q\\' \"d\"' }}|{{ \"it's\" }}|{{ 'a' 'b' }}", {}),
 ("literals_repr", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, (1, 2)] }}|{{ (1,) }}|{{ 'x' if false }}|{{ none }}|{{ True }}", {}),
 ("floats", "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 7/2 }} {{ 4/2 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 2.5e-7 }} {{ 123456789.125 }}", {}),
 ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 1 + 2 * 3 - 4 }} {{ 7.5 // 2 }} {{ true + 1 }}", {}),
 ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ missing ~ 2.0 }}", {}),
 ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 'a' != 'b' }} {{ none == none }} {{ 2 >= 2 }}", {}),
 ("in_not_in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in missing }}", {}),
 ("and_or_not", "{{ 0 or 'fallback' }} {{ 'a' and 'b' }} {{ not 0 }} {{ not missing }} {{ none or [] }}|{{ 1 and 0 }}", {}),
 ("inline_if", "{{ 'yes' if flag else 'no' }} {{ 'on' if not flag }}", {"flag": False}),
 ("attribute_and_item", "{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ m.items is callable }} {{ m['items'] }} {{ xs[0] }} {{ xs[-1] }} {{ xs[9] }}|{{ xs.1 }}", {"m": {"role": "user", "content": "hi", "items": "dict key"}, "xs": [10, 20, 30]}),
 ("slicing", "{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ [1, 2, 3, 4][1:] }} {{ [1, 2, 3][:-1] }} {{ [1, 2, 3][::-1] }} {{ 'héllo'[1:3] }} {{ [1,2,3][5:] }}", {}),
 ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ true is boolean }}{{ false is false }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 'a' is equalto 'a' }}{{ 2 is in [1, 2] }}{{ 'ab' is lower }}{{ x is not none }}{{ raise_exception is callable }}", {"x": 1}),
 ("filters_string", "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'hello world'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'MiXeD'|upper }}{{ 'MiXeD'|lower }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'é ü'|upper }}", {}),
 ("filters_seq", "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ [1, 2, 2, 1]|unique|list }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ [1, 2, 3]|sum }} {{ [1, 5, 3]|max }} {{ [4, 2]|min }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ 'abc'|first }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ missing|length }}", {}),
 ("filters_join_list", "{{ ['a', 'b']|join(', ') }}|{{ [1, 2]|join }}|{{ 'abc'|list }}|{{ {'k': 1, 'j': 2}|list }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'a': 1}|items|list }}", {}),
 ("filters_convert", "{{ 3.7|int }} {{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '3.5'|float }} {{ 3|float }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(method='ceil') }} {{ 3|string }} {{ -3|abs }} {{ [1]|string }}", {}),
 ("filters_default", "{{ missing|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ ''|d('e', boolean=true) }} {{ 'v'|default('d') }}", {}),
 ("filters_attr_select", "{{ xs|map(attribute='n')|join(',') }} {{ xs|selectattr('n', 'equalto', 1)|list }} {{ xs|rejectattr('n')|list|length }} {{ xs|selectattr('n')|map(attribute='n')|list }} {{ [1, 2, 3, 4]|select('even')|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ ['a', 'b']|map('upper')|list }} {{ xs|map(attribute='z', default='-')|join }}", {"xs": [{"n": 1}, {"n": 2}, {"n": 0}]}),
 ("filter_indent", "{{ 'ab\\ncd\\n\\nef'|indent(2) }}|{{ 'ab\\ncd'|indent(2, true) }}|{{ 'ab\\n\\ncd'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", {}),
 ("filter_tojson", "{{ x|tojson }}|{{ x|tojson(indent=2) }}|{{ x|tojson(sort_keys=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ 'é<&>\\u0001'|tojson }}", {"x": {"b": [1, 2.5, None], "a": {"t": True, "e": {}, "l": []}, "s": "é\n\"q\""}}),
 ("filter_misc", "{{ '<a href=\"x\">&</a>'|e }} {{ 'x'|safe }} {{ 'one two  three'|wordcount }} {{ 'ab'|center(6) }}| {{ [1,2,3,4,5]|batch(2)|list }} {{ 'x'|attr('upper') is callable }}", {}),
 ("string_methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ ' a  b '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hello there'.title() }}|{{ 'hELLO'.capitalize() }}|{{ '{} and {}'.format(1, 'b') }}|{{ '{0}{name}'.format('x', name='y') }}|{{ '-'.join(['a', 'b']) }}|{{ 'banana'.find('na') }}{{ 'banana'.count('a') }}|{{ '12'.isdigit() }}{{ 'a1'.isalpha() }}|{{ 'l1\\nl2'.splitlines() }}", {}),
 ("dict_methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {"d": {"a": 1, "b": 2}}),
 ("list_methods", "{{ [1, 2, 3].index(2) }} {{ [1, 1, 2].count(1) }}", {}),
 ("globals", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", {}),
 ("strftime_percent", "{{ strftime_now('%%') }}", {}),
 ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
 ("nested_data", "{% for m in messages %}{{ m.role|upper }}: {{ m.content }}{% if m.tool_calls %} -> {{ m.tool_calls[0].function.name }}({{ m.tool_calls[0].function.arguments|tojson }}){% endif %}\n{% endfor %}", {"messages": [{"role": "user", "content": "héllo 👋"}, {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "y": "ü"}}}]}]}),
 ("unicode", "{{ s|length }} {{ s[0] }} {{ s[-1] }} {{ s|reverse }} {{ s.upper() }}", {"s": "añ中😀"}),
 ("dict_literal_key_order", "{{ {'z': 1, 'a': 2, 'z': 3} }} {{ {'k': {'n': [1]}}['k']['n'][0] }}", {}),
]
errors = [
 ("undefined_attribute", "{{ missing.attr }}", {}),
 ("missing_dict_attribute_chain", "{{ d.missing.attr }}", {"d": {}}),
 ("add_undefined", "{{ missing + 1 }}", {}),
 ("call_undefined", "{{ missing() }}", {}),
 ("type_error_concat", "{{ 'a' + 1 }}", {}),
 ("raise_exception", "{% if true %}{{ raise_exception('custom failure') }}{% endif %}", {}),
 ("immutable_append", "{{ xs.append(1) }}", {"xs": []}),
 ("set_attr_non_namespace", "{% set q = 1 %}{% set q.a = 2 %}", {}),
 ("division_by_zero", "{{ 1 / 0 }}", {}),
 ("range_too_big", "{{ range(1000000)|length }}", {}),
]
def lit(s):
    # C++ raw string literal
    assert ')J"' not in s
    return 'R"J(' + s + ')J"'
print("// Generated from Python jinja2 %s with the transformers environment." % jinja2.__version__)
print("const RenderCase kRenderCases[] = {")
for name, t, ctx in cases:
    out = env.from_string(t).render(**ctx)
    print("    {%s, %s, %s, %s}," % (json.dumps(name), lit(t), lit(json.dumps(ctx, ensure_ascii=False)), lit(out)))
print("};")
print("const ErrorCase kErrorCases[] = {")
for name, t, ctx in errors:
    try:
        env.from_string(t).render(**ctx); raise SystemExit("no error: " + name)
    except jinja2.exceptions.TemplateError as e: msg = str(e)
    except Exception as e: msg = str(e)
    print("    {%s, %s, %s, %s}," % (json.dumps(name), lit(t), lit(json.dumps(ctx, ensure_ascii=False)), lit(msg)))
print("};")

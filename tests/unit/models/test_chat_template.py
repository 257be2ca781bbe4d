"""Chat templates render, and refuse, exactly as transformers' ``render_jinja_template`` does.

Templates are untrusted code from the Hub: the sandbox must refuse what transformers' refuses
(underscore attributes, namespace internals), and the helpers templates rely on must behave
the same (tojson without HTML escaping, raise_exception, loop controls, generation blocks).
"""

from __future__ import annotations

import dataclasses

import jinja2
import pytest
from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

from llm_byoc.models.chat_template import render_chat

CHAT = [{"role": "user", "content": "<b>é</b> & 'quotes' \"double\"", "name": None},
        {"role": "assistant", "content": "ok", "reasoning": "thought"}]

TEMPLATES = {
    "tojson": "{% for m in messages %}{{ m | tojson }}|{{ m | tojson(indent=2, sort_keys=True) }}{% endfor %}",
    "escaping_off": "{{ messages[0].content }}",
    "trim_and_lstrip": ("{% for m in messages %}\n    {% if m.role == 'user' %}\n  U:{{ m.content }}\n"
                        "    {% endif %}\n{% endfor %}"),
    "loop_controls": ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
                      "{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
    "namespace": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
    "dict_global": "{% set d = dict(a=1, b=messages | length) %}{{ d.a }}{{ d.b }}{{ dict.fromkeys(['x']) }}",
    "generation_block": "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "reasoning_alias": ("{% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}/"
                        "{{ m.name is defined }}{% endfor %}"),
    "variables": "{{ bos_token }}{{ custom }}{{ tools | tojson }}{{ documents | tojson }}{{ add_generation_prompt }}",
    "undefined": "{{ nothing }}{{ messages[0].missing }}|{{ nothing is defined }}",
    "strftime": "{{ strftime_now('%Y') | length }}",
    "format_in_the_sandbox": "{{ '{0.__class__}'.format(messages) }}",
}
REFUSED = {
    "raise_exception": "{{ raise_exception('no ' + messages[0].role) }}",
    "dunder_attribute": "{{ messages.__class__.__mro__ }}",
    "namespace_underscore": "{% set ns = namespace(_secret=1) %}{{ ns }}",
    "namespace_set_underscore": "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "mutating_a_list": "{{ messages.append(1) }}",
}
VARIABLES = {"bos_token": "<s>", "custom": {"k": [1, 2.5, True, None]}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
DOCUMENTS = [{"title": "t", "text": "x"}]


def _theirs(template, messages, **kwargs):
    conversation = _normalize_chat_messages(messages)
    rendered, _ = render_jinja_template(conversations=[conversation], chat_template=template, **kwargs)
    return rendered[0]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_renders_as_transformers(name):
    for generation_prompt in (True, False):
        expected = _theirs(TEMPLATES[name], CHAT, tools=TOOLS, documents=DOCUMENTS,
                           add_generation_prompt=generation_prompt, **VARIABLES)
        assert render_chat(TEMPLATES[name], CHAT, TOOLS, DOCUMENTS, generation_prompt, **VARIABLES) == expected


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refuses_what_transformers_refuses(name):
    with pytest.raises(Exception) as theirs:
        _theirs(REFUSED[name], CHAT)
    with pytest.raises(type(theirs.value)) as ours:
        render_chat(REFUSED[name], CHAT)
    assert str(ours.value) == str(theirs.value)
    assert isinstance(ours.value, jinja2.exceptions.TemplateError)


def test_rich_inputs_reach_the_template_as_plain_data():
    @dataclasses.dataclass
    class Message:
        role: str
        content: str
        extra: object = None

    class Unsafe:
        def write(self):  # a method the sandbox must never see
            raise AssertionError

    template = "{% for m in messages %}{{ m.role }}:{{ m.content }}:{{ m.extra }};{% endfor %}{{ thing }}"
    messages = [Message("user", "hi"), Message("assistant", "yo", extra=Unsafe())]
    assert render_chat(template, messages, thing=Unsafe()) == _theirs(template, messages, thing=Unsafe())
    assert render_chat(template, messages, thing=Unsafe()).endswith("<Unsafe>")


def test_tools_must_be_schemas():
    with pytest.raises(ValueError, match="JSON schemas"):
        render_chat("{{ tools }}", CHAT, [lambda city: city])

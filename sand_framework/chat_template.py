"""The chat template SAND gives models whose own template cannot mask the loss.

TRL's assistant-only loss needs ``{% generation %}`` markers around assistant
replies; stock templates (SmolLM2's included) lack them.
"""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML with ``{% generation %}`` markers so TRL can mask the loss to assistant turns."""

"""A tiny random-weight chat model for vLLM on CPU, built on the spot: nothing downloads weights.

``python -m sagestream_local.tiny_model DIR`` (run by vLLM's venv, which has ``torch``, ``transformers`` and
``tokenizers``) writes a Hugging Face model folder that ``vllm serve DIR`` loads: a byte-level BPE tokenizer
trained on the text below, and a two-layer Qwen2 (head_dim 64: vLLM's CPU attention refuses smaller heads;
about 0.5 M parameters) with weights from a fixed seed, and a chat template that renders system, user,
assistant and tool turns and the tools offered. It answers nonsense, deterministically: what the engine
tests compare is what a client gets through sagestream against what the same engine gives it directly.

The same files every time (tokenizer training is deterministic on a fixed text; the weights come from a
seeded generator; safetensors writes no timestamp), so a folder built once is reused: the build writes
``.built`` last, holding :data:`VERSION`, and a folder holding the current one is left as it is.

Environment variables read: none.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Bump when anything below changes what is written, so cached folders are rebuilt.
VERSION = "1"
CONTEXT = 512  # max_position_embeddings: tests/engine's context-overflow request goes past it
SEED = 35

# Training text: words the tests and agents use, so prompts tokenize into a few tokens each.
_CORPUS = """\
The quick brown fox jumps over the lazy dog. Hello, how are you today? I am fine, thank you.
What is the weather in Paris? The sky is clear in Oslo and it rains in Berlin for three days.
Call the function get_weather with the city name. Return a JSON object with the keys city and country.
You are a helpful assistant. Answer briefly. Count from one to ten: one two three four five six seven
eight nine ten. The user asks a question, the assistant answers, the tool returns a result.
{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
Numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000. Lists, tables, code: def main(): return 42
"""

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}"
    "<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}"
    "{%- elif message.content %}{%- for part in message.content %}{%- if part.type == 'text' %}{{ part.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}\n{{ call.function.name }}({{ call.function.arguments }})"
    "{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
PAD, START, END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL = [PAD, START, END]


def build(folder: Path) -> Path:
    """Write the model into ``folder`` unless it already holds this version; returns ``folder``."""
    marker = folder / ".built"
    if marker.is_file() and marker.read_text() == VERSION:
        return folder
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=END, pad_token=PAD, model_max_length=CONTEXT)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)

    config = Qwen2Config(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.token_to_id(PAD),
        eos_token_id=tokenizer.token_to_id(END),
        torch_dtype="float32",
        # 0.02 (the default) leaves every logit near zero and the same token wins whatever the prompt;
        # 0.5 makes the answer depend on the prompt, so concurrent streams can tell their tokens apart.
        initializer_range=0.5,
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": config.eos_token_id}) + "\n")
    marker.write_text(VERSION)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sagestream_local.tiny_model", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write the model (reused when already built)")
    args = parser.parse_args(argv)
    print(build(args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())

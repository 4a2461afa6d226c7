"""Chat messages become the prompt text each model family was trained on, ending at the assistant's turn."""

from __future__ import annotations

import pytest

from sagestream.dialects.prompts import names, template

CONVERSATION = [("system", "Be brief."), ("user", "  Hi  "), ("assistant", "Hello."), ("user", "Où?")]


def test_llama3_uses_header_tokens_and_opens_the_assistant_turn() -> None:
    assert template("llama3")(CONVERSATION) == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nOù?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_llama3_leaves_the_bos_token_to_the_containers_tokenizer() -> None:
    assert "<|begin_of_text|>" not in template("llama3")(CONVERSATION)


def test_llama3_names_a_tool_result_ipython() -> None:
    assert template("llama3")([("tool", '{"t": 21}')]).startswith("<|start_header_id|>ipython<|end_header_id|>")


def test_chatml_wraps_each_message_and_opens_the_assistant_turn() -> None:
    assert template("chatml")(CONVERSATION[:2]) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi  <|im_end|>\n<|im_start|>assistant\n"
    )


def test_names_are_case_and_space_insensitive() -> None:
    assert template(" ChatML ") is template("chatml")


def test_an_unknown_name_raises_and_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="chatml, llama3"):
        template("llama2")
    assert names() == ["chatml", "llama3"]

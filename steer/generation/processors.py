"""steer's decoding guards as plain `transformers` processors, for a user's own `model.generate()`
(with `steer.apply`, or on an unedited model).

- `NoThirdCopy(prompt_length, decode)`: a `LogitsProcessor` — the reply may not start a third
  consecutive copy of any run of tokens it has just produced twice (only generated tokens count).
- `NoInstructionEcho(prompt_length, first, ngrams)`: a `LogitsProcessor` — the reply may not start
  with the instruction's first word or copy 3 of its tokens the source lacks (build `first` and
  `ngrams` per row with `first_word_tokens` and `echo_ngrams`).
- `StopAtAnswer(decode, prompt_length)`: a `StoppingCriteria` — a row is done once its answer line
  (as `clean_output` reads it) is complete; `clean_output(reply)` then gives the answer.
- `SourceWordBonus(prompt_length, words, bonus)`: a `LogitsProcessor` — β on the first tokens of
  the source's content words a row has not begun yet in any spelling, and on the next token of a
  spelling the reply ends partway through (the `3k4` rung's `keep_words`; build `words` per row
  with `content_tokens(encode, source, skip)`: per word, its spellings' token ids; `skip`: the
  source style's markers, `steer.generation.markers.style_markers(source_texts, target_texts)`).
- `MarkerPenalty(prompt_length, spellings, penalty)`: a `LogitsProcessor` — −β on the last token of
  each of the source's marker spellings whenever the reply could finish it (the same rung's other
  half; build `spellings` per row with `marker_tokens(encode, source, markers)`).

`decode` is `tokenizer.decode`; `prompt_length` the prompt's length in tokens (`input_ids.shape[1]`).

    from transformers import LogitsProcessorList, StoppingCriteriaList
    from steer.generation.processors import NoThirdCopy, StopAtAnswer, clean_output

    n = inputs["input_ids"].shape[1]
    out = model.generate(**inputs, max_new_tokens=48, do_sample=False,
                         logits_processor=LogitsProcessorList([NoThirdCopy(n, tokenizer.decode)]),
                         stopping_criteria=StoppingCriteriaList([StopAtAnswer(tokenizer.decode, n)]))
    answer = clean_output(tokenizer.decode(out[0, n:], skip_special_tokens=True))
"""

from steer.generation.keeping import MarkerPenalty, SourceWordBonus, content_tokens, marker_tokens
from steer.generation.repetition import NoThirdCopy
from steer.generation.replies import NoInstructionEcho, StopAtAnswer, clean_output, echo_ngrams, first_word_tokens

__all__ = [
    "MarkerPenalty",
    "NoInstructionEcho",
    "NoThirdCopy",
    "SourceWordBonus",
    "StopAtAnswer",
    "clean_output",
    "content_tokens",
    "echo_ngrams",
    "first_word_tokens",
    "marker_tokens",
]

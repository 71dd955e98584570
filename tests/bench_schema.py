"""The keys every row and every summary entry of a bench's JSON document carries (`bench --json`):
what the tests of the bench's runs and of its command check a document against."""

from __future__ import annotations

ROW_KEYS = {
    "id",
    "suite",
    "mode",
    "tokens",
    "decode_tokens_per_s",
    "drafted",
    "accepted",
    "target_passes",
    "matches_ar",
    "ar_parted_at",
    "prompt_tokens",
    "target_read_tokens",
    "ttft_s",
    "target_read_s",
    "draft_read_s",
    "decode_s",
    "total_s",
    "total_tokens_per_s",
}
SUMMARY_KEYS = {
    "suite",
    "mode",
    "decode_tokens_per_s",
    "speedup_vs_ar",
    "acceptance",
    "tokens_per_pass",
    "k_histogram",
    "total_tokens_per_s",
    "total_speedup_vs_ar",
    "ttft_s",
    "target_read_s",
    "draft_read_s",
    "decode_s",
    "total_s",
}

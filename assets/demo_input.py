import json


def load_scores(path):
    with open(path) as f:
        return json.load(f)


def top_players(scores, n=3):
    ranked = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)
    return [name for name, _ in ranked[:n]]


def average(scores):
    if not scores:
        return 0.0
    return sum(scores.values()) / len(scores)

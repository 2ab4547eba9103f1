"""The DLLM rows' derived tables: the selection-rule table's rows and their order."""


def test_selection_rows_per_backbone_by_energy_then_rule_rerank_last():
    from unie.dllm.rows import selection_rows

    rows = {
        "llada": {"model": "llada"},
        "dream": {"model": "dream"},
        "llada_rerank": {
            "delta_to": "llada",
            "selection_table": True,
            "options": {"energy": "uni", "selection": "proxy_rerank"},
        },
        "llada_uni": {"delta_to": "llada", "options": {"energy": "uni"}},
        "llada_ind_resample": {
            "delta_to": "llada",
            "selection_table": True,
            "options": {"energy": "ind", "selection": "resample"},
        },
        "llada_ind": {"delta_to": "llada", "options": {"energy": "ind"}},
        "llada_apd": {"delta_to": "llada", "options": {"sampler": "apd"}},
        "dream_uni": {"delta_to": "dream", "options": {"energy": "uni"}},
    }
    assert list(selection_rows({"rows": rows})) == [
        "llada",
        "llada_ind",
        "llada_ind_resample",
        "llada_uni",
        "llada_rerank",
    ]
    assert selection_rows({"rows": {"llada": {}}}) == {}

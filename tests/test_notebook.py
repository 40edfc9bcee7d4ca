"""The quickstart notebook runs (issue 15): executed with nbclient on the shared traces."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(traces: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("TraceSet" in h and "<table" in h for h in html)  # rich reprs in Jupyter
    assert any("Prediction" in h and "MAPE" in h for h in html)
    assert any("PlanResult" in h for h in html)
    # traincast.report.figures: plotly figures (prediction, breakdown, plan), rendered by Jupyter
    plots = [o["data"]["application/vnd.plotly.v1+json"] for o in outputs
             if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) == 3 and all(p["data"] for p in plots)

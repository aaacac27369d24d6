"""What a watcher sees of a run in the Prefect UI, checked in a real browser (headless Chromium).

    python scripts/ui_check.py --run RUN_ID [--api http://127.0.0.1:4200/api] [--out ui-check]

Reads the run's generation flow runs and summary artifacts from the server's REST API, opens
each generation's flow run page and its artifact page at 1,600 px, and writes a screenshot of
each to ``--out``. It checks what a person would otherwise have to look for: no `nan` in the
artifact's text, no link a browser refuses to open (`file://`), no table wider than its page
(cells that push columns off-screen). The last line is the findings as JSON; exit 1 on a
finding. The run graph is drawn on a canvas: look at the screenshots for the stage chain
(`tests/flows/test_train.py` checks the task runs' inputs that draw it through the API).

Needs the `playwright` Python package (``pip install playwright``; its own browser download is
not needed) and Chromium (Debian: ``apt-get install chromium``, used at ``--chromium``). Not a
test of the suite: the browser is ~300 MB that CI does not need for anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

WIDTH = 1600
CHROMIUM_FLAGS = [  # a closed network: no background connections, no first-run work
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _post(api: str, path: str, body: dict) -> list[dict]:
    request = urllib.request.Request(
        f"{api.rstrip('/')}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def generation_runs(api: str, run_id: str) -> list[dict]:
    """The run's generation flow runs (named ``RUN/genN``), oldest first."""
    runs, page = [], 200  # the server's largest page
    while len(runs) % page == 0:
        body = {"flow_runs": {"name": {"like_": f"{run_id}/gen"}}, "limit": page, "offset": len(runs)}
        got = _post(api, "flow_runs/filter", body)
        runs += got
        if not got:
            break
    return sorted((r for r in runs if r["name"].startswith(f"{run_id}/gen")), key=lambda r: r["created"])


def artifacts_of(api: str, flow_run_id: str) -> list[dict]:
    return _post(api, "artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 50})


PAGE_FACTS = """() => {
  const text = document.body.innerText;
  const tables = [...document.querySelectorAll('table')].map(t => {
    const box = t.parentElement.getBoundingClientRect();
    return {width: Math.round(t.getBoundingClientRect().width), room: Math.round(box.width),
            scroll: t.parentElement.scrollWidth - t.parentElement.clientWidth,
            right: Math.round(t.getBoundingClientRect().right)};
  });
  return {nan: (text.match(/\\bnan\\b/gi) || []).length,
          file_links: [...document.querySelectorAll('a')].filter(a => a.href.startsWith('file:')).length,
          tables, viewport: window.innerWidth, text_chars: text.length};
}"""


def check(api: str, run_id: str, out: Path, chromium: str) -> dict:
    from playwright.sync_api import sync_playwright

    ui = api.rstrip("/").removesuffix("/api")
    out.mkdir(parents=True, exist_ok=True)
    findings: list[str] = []
    pages: list[dict] = []
    generations = generation_runs(api, run_id)
    if not generations:
        raise SystemExit(f"no flow run named {run_id}/gen… on {api}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 1200})
        for flow_run in generations:
            name = flow_run["name"].replace("/", "_")
            page.goto(f"{ui}/runs/flow-run/{flow_run['id']}", wait_until="networkidle")
            page.wait_for_timeout(3000)  # the graph is drawn after the page's data arrives
            page.screenshot(path=str(out / f"{name}-graph.png"))
            for artifact in artifacts_of(api, flow_run["id"]):
                if artifact["type"] != "markdown":
                    continue
                page.goto(f"{ui}/artifacts/artifact/{artifact['id']}", wait_until="networkidle")
                page.wait_for_timeout(2000)
                facts = page.evaluate(PAGE_FACTS)
                page.screenshot(path=str(out / f"{name}-{artifact['key']}.png"), full_page=True)
                facts |= {"page": f"{flow_run['name']} artifact {artifact['key']}"}
                pages.append(facts)
                if facts["nan"]:
                    findings.append(f"{facts['page']}: 'nan' {facts['nan']} times")
                if facts["file_links"]:
                    findings.append(f"{facts['page']}: {facts['file_links']} file:// links")
                for i, table in enumerate(facts["tables"]):
                    if table["scroll"] > 0 or table["right"] > facts["viewport"]:
                        findings.append(f"{facts['page']}: table {i} {table['width']} px wide in {table['room']} px")
        browser.close()
    return {"run": run_id, "generations": len(generations), "pages": pages, "findings": findings, "out": str(out)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="the run id (its generation flow runs are RUN/genN)")
    parser.add_argument("--api", default="http://127.0.0.1:4200/api", help="the Prefect API (PREFECT_API_URL)")
    parser.add_argument("--out", type=Path, default=Path("ui-check"), help="where the screenshots go")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium executable")
    args = parser.parse_args(argv)
    result = check(args.api, args.run, args.out, args.chromium)
    for finding in result["findings"]:
        print(finding)
    print(json.dumps(result))
    return 1 if result["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""`reckon ledger --html`: the page renders in headless Chromium (Debian's `chromium`) without console
errors, fetches nothing, and holds the series it promises (every tag of the memory timeline, the peak,
the roof, one point per layer predicted and measured), with the ledger's own figures."""
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

import reckon
from conftest import cli

TAGS = ["input", "param", "grad", "optimizer", "activation", "temporary", "workspace"]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "the browser tests need Debian's chromium (make test installs it)"
    return exe


def browse(page: str, tmp, *extra: str) -> subprocess.CompletedProcess:
    """Headless Chromium on a local page; console messages go to stderr (--enable-logging)."""
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp}/profile",
                           *extra, "file://" + os.path.abspath(page)],
                          capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    return [l for l in stderr.splitlines() if "CONSOLE" in l]


class Series(HTMLParser):
    """Elements with a data-series attribute (and the elements inside them) of a rendered page."""

    def __init__(self):
        super().__init__()
        self.series = {}   # name -> count of elements carrying it
        self.layers = {}   # series -> [data-layer, ...]
        self.stack = []
        self.peak_text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-series" in a:
            self.series[a["data-series"]] = self.series.get(a["data-series"], 0) + 1
        if "data-layer" in a and self.stack:
            self.layers.setdefault(self.stack[-1], []).append(a["data-layer"])
        self.stack.append(a.get("data-series", self.stack[-1] if self.stack else None))

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "peak":
            self.peak_text += data


def png_pixels_vary(path: str) -> int:
    """The number of distinct byte values in the PNG's decompressed image data (a blank page has few)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    idat, pos = b"", 8
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)))


def test_the_console_check_catches_an_error(tmp_path):
    # The harness itself: a page that logs an error is seen as one.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('broken page')</script></body></html>")
    p = browse(str(bad), tmp_path, "--dump-dom")
    assert any("broken page" in l for l in console_lines(p.stderr)), p.stderr[-2000:]


def test_the_html_report_renders_with_every_series(tmp_path):
    page = tmp_path / "resnet18_cifar.html"
    j = json.loads(cli("ledger", "resnet18_cifar", "--batch", "4", "--measure", "--measure-steps", "1", "--html",
                       str(page), "--json").stdout)
    html = page.read_text()
    # Self-contained: nothing to fetch, nothing to run.
    assert "<script" not in html and " src=" not in html and " href=" not in html
    assert set(re.findall(r"https?://[^\"' ]+", html)) <= {"http://www.w3.org/2000/svg"}

    dom = browse(str(page), tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_lines(dom.stderr) == [], console_lines(dom.stderr)
    s = Series()
    s.feed(dom.stdout)
    for tag in TAGS:
        assert s.series.get("tag-" + tag) == 1, (tag, s.series)
    assert s.series.get("roof") == 1 and s.series.get("peak") == 1
    assert s.series.get("phase-forward", 0) >= 1 and s.series.get("phase-backward", 0) >= 1
    assert s.series.get("phase-optimizer", 0) >= 1
    # One point per layer that has a time, predicted and measured, named as the JSON names them.
    timed = [r["scope"] for r in j["layers"] if r["fwd_flops"] + r["bwd_flops"] > 0 and r["bytes_moved"] > 0
             and r["time_s"] > 0]
    assert s.layers["layers-predicted"] == timed
    assert set(s.layers["layers-measured"]) <= set(timed) and len(s.layers["layers-measured"]) >= len(timed) - 2
    # The peak label is the ledger's peak.
    assert f"{j['memory']['peak_bytes'] / 2**20:.1f} MiB" in s.peak_text
    # The table has a row per layer.
    assert dom.stdout.count("<tr>") == len(j["layers"]) + 1

    shot = tmp_path / "shot.png"
    p = browse(str(page), tmp_path, "--window-size=1100,1600", f"--screenshot={shot}", "--hide-scrollbars")
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    with open(shot, "rb") as f:
        w, h = struct.unpack(">II", f.read(24)[16:24])
    assert (w, h) == (1100, 1600)
    assert png_pixels_vary(str(shot)) > 40  # coloured bands and text, not a blank page


def test_python_writes_the_same_page(tmp_path):
    cli("ledger", "lenet5", "--batch", "16", "--html", str(tmp_path / "cli.html"))
    reckon.ledger("lenet5", batch=16, html=tmp_path / "py.html")
    assert (tmp_path / "py.html").read_text() == (tmp_path / "cli.html").read_text()
    with pytest.raises(reckon.Error, match="inference"):
        reckon.ledger("lenet5", batch=1, inference=True, html=tmp_path / "x.html")
    assert cli("ledger", "lenet5", "--batch", "1", "--inference", "--html", str(tmp_path / "x.html"),
               check=False).returncode == 2

#!/usr/bin/env python3
"""Prints an OAuth access token for API key KEY from a tollgate at BASE (http://HOST:PORT),
obtained the way an OAuth-only client gets one: Dynamic Client Registration, /authorize with
PKCE S256, the consent form submitted with the key (as a browser would), /token.

usage: get-token.py BASE KEY"""
import base64
import hashlib
import html.parser
import json
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request

REDIRECT = "http://127.0.0.1:9/callback"  # never fetched: the 302's Location is read


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class FormFields(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden" and "name" in a:
            self.fields[a["name"]] = a.get("value", "")


def main():
    base, key = sys.argv[1], sys.argv[2]
    opener = urllib.request.build_opener(NoRedirect)
    reg = json.loads(urllib.request.urlopen(urllib.request.Request(
        base + "/register", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"client_name": "perf token-vs-key", "redirect_uris": [REDIRECT]}).encode()
    )).read())
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    q = urllib.parse.urlencode({
        "response_type": "code", "client_id": reg["client_id"], "redirect_uri": REDIRECT,
        "code_challenge": challenge.decode(), "code_challenge_method": "S256", "state": "perf",
        "resource": base + "/mcp"})
    page = FormFields()
    page.feed(urllib.request.urlopen(base + "/authorize?" + q).read().decode())
    fields = dict(page.fields, api_key=key, action="allow")
    try:
        opener.open(urllib.request.Request(base + "/authorize", method="POST",
                                           data=urllib.parse.urlencode(fields).encode()))
        sys.exit("the consent form did not redirect")
    except urllib.error.HTTPError as e:
        if e.code != 302:
            sys.exit(f"consent answered {e.code}: {e.read().decode()}")
        code = urllib.parse.parse_qs(urllib.parse.urlparse(e.headers["Location"]).query)["code"][0]
    tok = json.loads(urllib.request.urlopen(urllib.request.Request(
        base + "/token", method="POST", data=urllib.parse.urlencode({
            "grant_type": "authorization_code", "code": code, "code_verifier": verifier,
            "redirect_uri": REDIRECT, "client_id": reg["client_id"],
            "resource": base + "/mcp"}).encode())).read())
    print(tok["access_token"])


if __name__ == "__main__":
    main()

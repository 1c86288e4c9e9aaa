import urllib.request
urllib.request.urlopen('http://127.0.0.1:LISTEN_PORT/')

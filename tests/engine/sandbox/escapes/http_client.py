import http.client
http.client.HTTPConnection('127.0.0.1', LISTEN_PORT).request('GET', '/')

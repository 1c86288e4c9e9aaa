import json
print(json.decoder.__dict__)

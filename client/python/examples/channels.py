"""Publish/subscribe between processes of one scope, and lifecycle events."""
import coord

with coord.Client() as c, coord.Client() as other:
    with c.subscribe("config-changed", timeout=0.2) as sub, c.watch("-locks") as events:
        other.publish("config-changed", b"reload")
        for msg in sub:                          # ends after 0.2 s without a message
            print("message:", msg.channel, msg.data)
        with other.lock("db-migrate"):
            pass
        for ev in events:
            print("lifecycle:", ev.channel, ev.what, ev.get("name"))
            if ev.what == "released":
                break

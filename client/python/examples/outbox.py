"""Outbox claims: claim an op before its external effect, commit after.
A leader that dies in between leaves the claim pending; the next leader
reconciles it with the external system by the same op id."""
import coord

sent = {}                                   # the external system, by op id


def send_email(op_id, to):
    sent[op_id] = to


with coord.Client(client="outbox-example") as c:
    first = coord.Client(client="outbox-first")
    lead = first.leader("mailer")
    lead.campaign()
    if lead.claim("email-42").claimed:
        send_email("email-42", "ops@example.com")
    first.close()                           # dies before the commit

    with c.leader("mailer", timeout=5.0) as lead:
        for op in lead.pending():           # oldest claim first
            claim = lead.claim(op.op_id)
            if claim.reconcile and op.op_id in sent:
                lead.commit(op.op_id)       # it did happen: settle it
                print(f"reconciled {op.op_id}: already sent, committed")
            elif claim.claimed:
                send_email(op.op_id, "ops@example.com")
                lead.commit(op.op_id)
        print("pending now:", lead.pending())
        again = lead.claim("email-42")
        print("claim again: claimed", again.claimed, "applied", again.applied)
        lead.abandon("email-43", "the customer unsubscribed")
        print("abandoned 43:", lead.claim("email-43").abandoned)

"""Families that act on the user's behalf or compute: travel booking, retail orders, calculation and code.

Each family writes one healthy run into a :class:`~model.data.datagen.scenario.Scenario`
(:mod:`model.data.datagen.families`)."""

from __future__ import annotations

from typing import Any

from model.data.datagen.families.goals import goal, system_prompt
from model.data.datagen.lexicon import COMPANIES, PRODUCTS
from model.data.datagen.scenario import Constraint, Scenario

# --------------------------------------------------------------------------- travel


def travel(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("search_flights", "Search flights.", {"origin": "string", "destination": "string", "date": "string",
                                                  "max_stops": "integer"}, ["origin", "destination", "date"])
    sc.tool("book_flight", "Book a flight by id.", {"flight_id": "string", "passenger": "string"},
            ["flight_id", "passenger"])
    sc.tool("search_hotels", "Search hotels.", {"city": "string", "check_in": "string", "nights": "integer"},
            ["city", "check_in", "nights"])
    sc.tool("book_hotel", "Book a hotel room.", {"hotel_id": "string", "guest": "string", "nights": "integer"},
            ["hotel_id", "guest", "nights"])
    system_prompt(sc, ["You are a travel booking agent. Confirm details before booking.",
                       "You book trips for employees of " + lx.pair(r.choice(COMPANIES)) + ". Follow the travel policy."],
                  ["你是一名差旅预订助手，预订前先确认细节。", "你为员工预订差旅，请遵守差旅政策。"])
    a, b = lx.city(), lx.city()
    while b == a:
        b = lx.city()
    d = lx.day(3, 50)
    pax = lx.person()
    cur = lx.cur()
    budget = r.choice([300, 400, 500, 650, 800]) * (7 if cur == "CNY" else 1)
    hotel_task = r.random() < 0.4
    if not hotel_task:
        goal(sc, "flight", ["Book me a flight from {a} to {b} on {d}. Passenger: {p}.",
                            "I need to get from {a} to {b} on {d} - please find and book something for {p}.",
                            "Can you book {p} on a flight {a} -> {b}, {d}?",
                            "Find the best flight from {a} to {b} on {d} and book it (traveller: {p})."],
             ["帮我订一张{d}从{a}到{b}的机票，乘客{p}。", "{d}要从{a}去{b}，请帮{p}找一个航班并预订。",
              "请为{p}预订{d}{a}飞{b}的航班。"],
             a=lx.cname(a), b=lx.cname(b), d=lx.fdate(d), p=lx.name(pax))
        airlines = ["LH", "AF", "CA", "MU", "NH", "BA", "UA", "SQ", "TK", "KL", "CZ", "EK"]
        fl: list[dict[str, Any]] = []
        for _ in range(r.randrange(3, 6)):
            price = round(budget * r.uniform(0.55, 1.6), 0)
            fl.append({"flight_id": lx.ident(r.choice(airlines), 4), "depart": f"{r.randrange(6, 22):02d}:"
                       f"{r.choice(['00', '15', '30', '45', '05', '50'])}", "stops": r.choice([0, 0, 1, 1, 2]),
                       "price": price, "currency": cur})
        ok = [f for f in fl if f["price"] <= budget]
        if not ok:
            fl[0]["price"] = round(budget * 0.8, 0)
            ok = [fl[0]]
        over = [f for f in fl if f["price"] > budget]
        if not over:
            fl[-1]["price"] = round(budget * 1.35, 0)
            over = [fl[-1]]
        pick = min(ok, key=lambda f: f["price"])
        constrained = r.random() < 0.5
        if constrained:
            sc.goal += sc.t([f" Keep it under {lx.fmoney(budget, cur)}.", f" Budget is {lx.fmoney(budget, cur)} max.",
                             f" Company policy caps fares at {lx.fmoney(budget, cur)}."],
                            [f"预算不超过{lx.fmoney(budget, cur)}。", f"公司规定票价上限{lx.fmoney(budget, cur)}。"])
        sc.call("search_flights", {"origin": a[3], "destination": b[3], "date": d.isoformat()},
                {"flights": fl, "page": 1, "total_pages": 1},
                thought=sc.t(["Searching flights.", f"Let me look for flights {a[3]} to {b[3]}."],
                             ["先搜索航班。", f"查询{a[3]}到{b[3]}的航班。"]) if r.random() < 0.6 else None,
                empty={"flights": [], "page": 1, "total_pages": 0}, key=True)
        conf = lx.ident("", 6, digits=False)
        bid = sc.call("book_flight", {"flight_id": pick["flight_id"], "passenger": pax.en},
                      {"status": "confirmed", "confirmation": conf, "flight_id": pick["flight_id"],
                       "charged": pick["price"], "currency": cur},
                      thought=sc.t([f"{pick['flight_id']} at {pick['depart']} is the cheapest option that fits. "
                                    "Booking it.", f"Going with {pick['flight_id']}."],
                                   [f"{pick['flight_id']}（{pick['depart']}起飞）是符合要求的最便宜选项，现在预订。",
                                    f"选择{pick['flight_id']}。"]))

        def fin(f: dict[str, Any], cf: str) -> str:
            return sc.t([f"Booked! {pax.en} is on {f['flight_id']} from {a[0]} to {b[0]} on {lx.fdate(d)}, departing "
                         f"{f['depart']}, {lx.fmoney(f['price'], cur)}. Confirmation code {cf}.",
                         f"Done - flight {f['flight_id']} ({f['depart']}, {f['stops']} stop(s)) is confirmed for "
                         f"{pax.en}. Fare {lx.fmoney(f['price'], cur)}, reference {cf}."],
                        [f"已订好！{pax.zh}乘坐{f['flight_id']}，{lx.fdate(d)} {f['depart']}从{a[1]}飞往{b[1]}，票价"
                         f"{lx.fmoney(f['price'], cur)}，确认号{cf}。",
                         f"预订成功：{f['flight_id']}航班（{f['depart']}起飞，经停{f['stops']}次），乘客{pax.zh}，"
                         f"费用{lx.fmoney(f['price'], cur)}，订单号{cf}。"])

        sc.final_ok = fin(pick, conf)
        fake = {"flight_id": lx.ident(r.choice(airlines), 4),
                "depart": f"{r.randrange(6, 22):02d}:{r.choice(['00', '15', '30', '45', '05', '50'])}",
                "stops": r.choice([0, 0, 1, 1, 2]), "price": round(budget * r.uniform(0.55, 1.0), 0)}
        sc.final_invented = fin(fake, lx.ident("", 6, digits=False))
        if constrained:
            bad = max(over, key=lambda f: f["price"])
            sc.constraint = Constraint("budget", fin(bad, conf), (bid, {"flight_id": bad["flight_id"],
                                                                      "passenger": pax.en}))
            sc.meta["violating_payload"] = {"status": "confirmed", "confirmation": conf,
                                            "flight_id": bad["flight_id"], "charged": bad["price"],
                                            "currency": cur}
        sc.meta["dependent_call"] = bid
    else:
        nights = r.randrange(1, 7)
        goal(sc, "hotel", ["Find a hotel in {b} from {d} for {n} nights and book it for {p}.",
                           "Need a room in {b}, checking in {d}, {n} nights. Guest name {p}.",
                           "book {p} a hotel in {b} ({n} nights from {d})"],
             ["帮{p}在{b}订酒店，{d}入住，住{n}晚。", "我需要{b}的酒店，{d}入住{n}晚，客人{p}。"],
             b=lx.cname(b), d=lx.fdate(d), n=nights, p=lx.name(pax))
        names = ["Grand Plaza", "Riverside Inn", "Harbor View", "City Central", "Garden Suites", "Skyline Hotel",
                 "Old Town Lodge", "Metro Stay"]
        hs: list[dict[str, Any]] = []
        for nm in r.sample(names, r.randrange(3, 6)):
            hs.append({"hotel_id": lx.ident("H", 5), "name": f"{nm} {b[0]}", "rating": round(r.uniform(3.1, 4.9), 1),
                       "price_per_night": round(budget / 3 * r.uniform(0.5, 1.7), 0), "currency": cur,
                       "breakfast": r.random() < 0.5})
        cap = round(budget / 3, 0)
        ok = [h for h in hs if h["price_per_night"] <= cap] or [hs[0]]
        ok[0]["price_per_night"] = min(ok[0]["price_per_night"], cap)
        over = [h for h in hs if h["price_per_night"] > cap] or [hs[-1]]
        over[0]["price_per_night"] = max(over[0]["price_per_night"], round(cap * 1.4))
        pick = max(ok, key=lambda h: h["rating"])
        constrained = r.random() < 0.5
        if constrained:
            sc.goal += sc.t([f" No more than {lx.fmoney(cap, cur)} a night.", f" Max {lx.fmoney(cap, cur)}/night."],
                            [f"每晚不超过{lx.fmoney(cap, cur)}。", f"房价上限每晚{lx.fmoney(cap, cur)}。"])
        sc.call("search_hotels", {"city": b[0], "check_in": d.isoformat(), "nights": nights},
                {"hotels": hs, "count": len(hs)}, empty={"hotels": [], "count": 0}, key=True,
                thought=sc.t(["Checking availability.", "Let me search hotels."], ["查询空房。", "先搜索酒店。"])
                if r.random() < 0.5 else None)
        conf = lx.ident("HB", 7)
        bid = sc.call("book_hotel", {"hotel_id": pick["hotel_id"], "guest": pax.en, "nights": nights},
                      {"status": "booked", "reservation": conf, "hotel_id": pick["hotel_id"],
                       "total": pick["price_per_night"] * nights, "currency": cur})

        def hfin(h: dict[str, Any], cf: str) -> str:
            return sc.t([f"You're booked at {h['name']} ({h['rating']}★) for {nights} nights from {lx.fdate(d)}, "
                         f"{lx.fmoney(h['price_per_night'], cur)} per night. Reservation {cf}.",
                         f"Reserved {h['name']} for {pax.en}: check-in {lx.fdate(d)}, {nights} nights, "
                         f"{lx.fmoney(h['price_per_night'] * nights, cur)} total. Ref {cf}."],
                        [f"已为您预订{h['name']}（{h['rating']}星），{lx.fdate(d)}入住{nights}晚，每晚"
                         f"{lx.fmoney(h['price_per_night'], cur)}，预订号{cf}。",
                         f"已为{pax.zh}预订{h['name']}：{lx.fdate(d)}入住，共{nights}晚，总价"
                         f"{lx.fmoney(h['price_per_night'] * nights, cur)}，订单号{cf}。"])

        sc.final_ok = hfin(pick, conf)
        sc.final_invented = hfin({"name": f"{r.choice(names)} {b[0]}", "rating": round(r.uniform(3.5, 4.9), 1),
                                  "price_per_night": round(cap * 0.8)}, lx.ident("HB", 7))
        if constrained:
            bad = over[0]
            sc.constraint = Constraint("budget", hfin(bad, conf), (bid, {"hotel_id": bad["hotel_id"],
                                                                       "guest": pax.en, "nights": nights}))
            sc.meta["violating_payload"] = {"status": "booked", "reservation": conf, "hotel_id": bad["hotel_id"],
                                            "total": bad["price_per_night"] * nights, "currency": cur}
        sc.meta["dependent_call"] = bid
    sc.final_empty = sc.t(["Nothing is available for those dates, so I haven't booked anything. Want me to try "
                           "nearby dates?", "The search came back empty - no options on that date. Shall I widen it?"],
                          ["那天没有可订的选项，我没有进行预订。要不要试试相邻的日期？", "搜索结果为空，那天没有可选项。要放宽条件吗？"])
    sc.final_fail = sc.t(["The booking system returned an error, so nothing has been booked. I can retry or "
                          "hand this to a human agent.", "I couldn't complete the booking because the provider "
                          "failed; no charge was made."],
                         ["预订系统返回了错误，目前没有完成预订。我可以重试或转人工。", "供应商接口失败，预订未完成，也没有扣款。"])


# --------------------------------------------------------------------------- retail


def retail(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("lookup_order", "Fetch an order by id.", {"order_id": "string"}, ["order_id"])
    sc.tool("get_policy", "Return the store policy on a topic.", {"topic": "string"}, ["topic"])
    sc.tool("issue_refund", "Refund an order (or items of it).", {"order_id": "string", "amount": "number",
                                                                   "method": "string"}, ["order_id", "amount"])
    sc.tool("update_address", "Change the shipping address of an unshipped order.",
            {"order_id": "string", "address": "string"}, ["order_id", "address"])
    store = lx.pair(r.choice(COMPANIES))
    system_prompt(sc, [f"You are {store}'s customer-service agent. Follow the refund policy exactly; never reveal other "
                       "customers' data.", f"Support agent for {store}. Be polite; apply policies."],
                  [f"你是{store}的客服代理，严格遵守退款政策，不得泄露其他客户信息。", f"你是{store}的客服，请礼貌并按政策处理。"])
    cust = lx.person()
    oid = lx.ident("#", 6)
    prod = r.choice(PRODUCTS)
    cur = lx.cur()
    price = lx.money(25, 600)
    days = r.randrange(3, 45)
    window = r.choice([14, 30])
    order = {"order_id": oid, "customer": cust.en, "email": cust.email, "items": [
        {"sku": lx.ident("SKU-", 5), "name": prod[0], "qty": 1, "price": price}], "currency": cur,
        "status": r.choice(["delivered", "delivered", "shipped"]), "delivered_days_ago": days,
        "payment": r.choice(["visa ****" + str(r.randrange(1000, 9999)), "paypal", "alipay", "wechat_pay"])}
    refund_task = r.random() < 0.6
    if refund_task:
        goal(sc, "refund", ["Hi, I want a refund for order {o}. The {p} stopped working.",
                            "Order {o}: the {p} arrived damaged. Can I get my money back?",
                            "i'd like to return my {p} (order {o}) and get refunded please",
                            "Hello - requesting a refund on {o}, the {p} isn't what was advertised."],
             ["你好，我要为订单{o}申请退款，{p}坏了。", "订单{o}的{p}收到时就坏了，能退款吗？",
              "我想退掉{p}（订单{o}），请帮我退款。"], o=oid, p=lx.pair(prod))
        sc.call("lookup_order", {"order_id": oid}, order, key=True,
                empty={"order": None, "message": f"no order {oid}"},
                thought=sc.t(["Let me pull up the order.", "I'll look up that order first."],
                             ["我先查一下订单。", "先查询订单信息。"]) if r.random() < 0.7 else None)
        pol = {"topic": "refunds", "text": f"Items may be returned within {window} days of delivery for a full "
               f"refund to the original payment method. Damaged items are refundable within 60 days."}
        sc.call("get_policy", {"topic": "refunds"}, pol)
        eligible = days <= window or r.random() < 0.5
        ref = lx.ident("RF", 6)

        def rans(amount: float, rid: str, credit: bool) -> str:
            m = lx.fmoney(amount, cur)
            if credit:
                return sc.t([f"Done: {m} has been added to your store credit (refund {rid}).",
                             f"Refund {rid} is processed as store credit - {m} is available on your account now.",
                             f"I've refunded {m} to your store balance (ref {rid})."],
                            [f"已将{m}退到您的商城余额（退款号{rid}）。", f"退款{rid}已处理，{m}已存入您的账户余额。"])
            return sc.t([f"I've issued a full refund of {m} for order {oid} (refund {rid}). It will reach your "
                         "original payment method in a few business days.",
                         f"All set - refund {rid} for {m} is processed. Sorry about the {prod[0]}!",
                         f"Refund {rid} ({m}) has gone through; expect it on your statement within about a week.",
                         f"You're refunded: {m}, reference {rid}. Sorry for the trouble with the {prod[0]}."],
                        [f"已为订单{oid}全额退款{m}（退款号{rid}），几个工作日内退回原支付方式。",
                         f"退款{rid}已处理，金额{m}。给您带来不便很抱歉！",
                         f"已退款{m}（单号{rid}），预计一周内到账。"])

        credit = r.random() < 0.4
        if credit:
            sc.goal += sc.t([" Please refund it to my store credit, not my card.",
                             " I'd prefer store credit instead of a card refund."],
                            ["请退到商城余额，不要退回银行卡。", "我希望退成店铺余额，而不是原路退回。"])
        if eligible:
            sc.call("issue_refund", {"order_id": oid, "amount": price, "method": "store_credit" if credit else "original"},
                    {"refund_id": ref, "status": "processed", "amount": price, "currency": cur,
                     "method": "store_credit" if credit else "original", "eta_days": r.randrange(3, 11)})
            sc.final_ok = rans(price, ref, credit)
            if credit:
                sc.constraint = Constraint("refund_method", rans(price, ref, False),
                                           (sc.n_calls - 1, {"order_id": oid, "amount": price, "method": "original"}))
                sc.meta["violating_payload"] = {"refund_id": ref, "status": "processed", "amount": price,
                                                "currency": cur, "method": "original", "eta_days": 5}
        else:
            sc.final_ok = sc.t([f"I'm sorry - order {oid} was delivered {days} days ago, outside our {window}-day "
                                "return window, so I can't refund it. If it's defective, I can open a warranty claim.",
                                f"Unfortunately this order is past the {window}-day window ({days} days). I can "
                                f"help with a warranty repair instead."],
                               [f"很抱歉，订单{oid}已签收{days}天，超过了{window}天退货期限，无法退款。如果是质量问题，可以为您申请保修。",
                                f"该订单已超过{window}天退货期（{days}天），我可以帮您走保修流程。"])
        sc.final_invented = rans(lx.money(25, 600), lx.ident("RF", 6), credit)
    else:
        addr = f"{r.randrange(1, 300)} {r.choice(['Oak', 'Elm', 'Harbor', 'Station', 'Mill'])} St, {lx.city()[0]}"
        if sc.zh:
            street = r.choice(['人民路', '解放路', '中山路', '建设路', '和平街', '长江路'])
            addr = f"{lx.cname(lx.city())}{r.choice(['高新区', '经开区', '新城区', '老城区'])}{street}{r.randrange(1, 300)}号"
        order["status"] = "processing"
        goal(sc, "address", ["Can you change the shipping address on {o} to {addr}?",
                             "I moved - please ship order {o} to {addr} instead.",
                             "update delivery address for {o}: {addr}"],
             ["请把订单{o}的收货地址改成{addr}。", "我搬家了，订单{o}请寄到{addr}。"], o=oid, addr=addr)
        sc.call("lookup_order", {"order_id": oid}, order, key=True, empty={"order": None, "message": f"no order {oid}"})
        eta = lx.day(2, 12)
        sc.call("update_address", {"order_id": oid, "address": addr}, {"order_id": oid, "address": addr,
                                                                         "status": "updated", "eta": eta.isoformat()})

        def uans(when: Any, grounded: bool = True) -> str:
            if not grounded:  # an invented answer states the (made-up) delivery date
                return sc.t([f"Done. The {prod[0]} on order {oid} is going to {addr}; estimated delivery "
                             f"{lx.fdate(when)}.", f"The shipping address is now {addr}. Expected arrival: "
                             f"{lx.fdate(when)}."], [f"好的，订单{oid}的收货地址已改为{addr}，预计{lx.fdate(when)}送达。",
                                                    f"收货地址已改为{addr}，预计送达时间{lx.fdate(when)}。"])
            return sc.t([f"Updated - order {oid} will now ship to {addr}.",
                         f"Done. The {prod[0]} on order {oid} is going to {addr}; estimated delivery {lx.fdate(when)}.",
                         f"The shipping address is now {addr}. Expected arrival: {lx.fdate(when)}.",
                         f"Changed it - {oid} ships to {addr} and should arrive around {lx.fdate(when)}."],
                        [f"已更新，订单{oid}将寄往{addr}。", f"好的，订单{oid}的收货地址已改为{addr}，预计{lx.fdate(when)}送达。",
                         f"收货地址已改为{addr}，预计送达时间{lx.fdate(when)}。"])

        sc.final_ok = uans(eta)
        sc.final_invented = uans(lx.day(13, 30), grounded=False)
    sc.final_empty = sc.t([f"I couldn't find an order {oid} in our system. Could you double-check the number or the "
                           "email you ordered with?", f"There's no order matching {oid}. Can you confirm it?"],
                          [f"系统里没有找到订单{oid}，能否核对一下订单号或下单邮箱？", f"没有查到{oid}这个订单，请确认一下。"])
    sc.final_fail = sc.t(["Our order system returned an error, so I couldn't complete that. I've flagged it for a "
                          "colleague.", "Something went wrong on our side and the change didn't go through."],
                         ["订单系统出错，暂时无法完成，我已转给同事跟进。", "我们这边系统出了问题，操作没有成功。"])
    sc.meta["pii"] = {"email": cust.email, "card": str(order["payment"])}


# --------------------------------------------------------------------------- calc_code


def calc_code(sc: Scenario) -> None:
    r = sc.rng
    sc.tool("python", "Execute Python code and return stdout.", {"code": "string"}, ["code"])
    sc.tool("calculator", "Evaluate an arithmetic expression.", {"expression": "string"}, ["expression"])
    system_prompt(sc, ["You are a careful analyst. Use python for any arithmetic.", "Solve the task; run code to check."],
                  ["你是一名严谨的分析师，任何计算都用python完成。", "请解决问题，用代码验证。"])
    kind = r.randrange(3)
    if kind == 0:
        p = r.randrange(50, 900) * 1000
        rate = r.choice([3.2, 3.9, 4.25, 4.8, 5.5, 6.1, 2.85])
        years = r.choice([10, 15, 20, 25, 30])
        m = rate / 1200
        pay = p * m / (1 - (1 + m) ** (-years * 12))
        goal(sc, "loan", ["What's the monthly payment on a {p} loan at {rate}% over {y} years?",
                          "Compute the monthly repayment for {p} borrowed at {rate}% APR for {y} years.",
                          "mortgage calc: principal {p}, {rate}% annual, {y}y term - monthly payment?"],
             ["贷款{p}，年利率{rate}%，{y}年还清，每月还款多少？", "帮我算一下：本金{p}，年化{rate}%，期限{y}年，月供是多少？"],
             p=f"{p:,}", rate=rate, y=years)
        code = (f"p={p}\nr={rate}/1200\nn={years}*12\nprint(round(p*r/(1-(1+r)**-n), 2))")
        out = f"{pay:.2f}\n"
        def lans(v: float) -> str:
            return sc.t([f"The monthly payment is about {v:,.2f}.", f"You'd pay {v:,.2f} per month over {years * 12} "
                         "payments.", f"Monthly repayment: {v:,.2f} (total paid ≈ {v * years * 12:,.0f}).",
                         f"≈ {v:,.2f} a month."],
                        [f"每月还款约为{v:,.2f}。", f"共{years * 12}期，每期还款{v:,.2f}。",
                         f"月供约{v:,.2f}，总还款约{v * years * 12:,.0f}。"])

        sc.final_ok = lans(pay)
        sc.final_invented = lans(pay * r.uniform(0.8, 1.25))
    elif kind == 1:
        xs = [r.randrange(10, 200) for _ in range(r.randrange(6, 14))]
        xs_s = sorted(xs)
        n = len(xs)
        med = (xs_s[n // 2] if n % 2 else (xs_s[n // 2 - 1] + xs_s[n // 2]) / 2)
        mean = sum(xs) / n
        goal(sc, "stats", ["Here are response times in ms: {xs}. What are the mean and median?",
                           "Compute mean and median of {xs}.", "I logged these values {xs} - give me the average and "
                           "the median, rounded to 2 decimals."],
             ["这些是响应时间（毫秒）：{xs}，平均值和中位数是多少？", "计算{xs}的均值和中位数。"], xs=xs)
        def st(vals: list[int]) -> tuple[float, float]:
            vs = sorted(vals)
            k = len(vs)
            return sum(vs) / k, (vs[k // 2] if k % 2 else (vs[k // 2 - 1] + vs[k // 2]) / 2)

        def sans(mn: float, md: float) -> str:
            return sc.t([f"Mean {mn:.2f} ms, median {md} ms.", f"The average is {mn:.2f} and the median is {md}.",
                         f"mean = {mn:.2f}, median = {md}", f"Average {mn:.2f} ms; the median sits at {md} ms."],
                        [f"平均值{mn:.2f}毫秒，中位数{md}毫秒。", f"均值为{mn:.2f}，中位数为{md}。", f"均值{mn:.2f}，中位数{md}。"])

        cap = 150
        constrained = any(x > cap for x in xs) and r.random() < 0.5
        if constrained:
            sc.goal += sc.t([f" Ignore values above {cap} - those were timeouts.", f" Drop anything over {cap} first."],
                            [f"超过{cap}的值是超时，请先剔除。", f"先去掉大于{cap}的值。"])
            kept = [x for x in xs if x <= cap]
            mean, med = st(kept)
            code = f"import statistics as s\nxs=[x for x in {xs} if x <= {cap}]\nprint(round(s.mean(xs),2), s.median(xs))"
        else:
            code = f"import statistics as s\nxs={xs}\nprint(round(s.mean(xs),2), s.median(xs))"
        out = f"{round(mean, 2)} {med}\n"
        sc.final_ok = sans(mean, med)
        sc.final_invented = sans(mean * r.uniform(0.8, 1.2), med + r.randrange(3, 20))
        if constrained:
            am, amd = st(xs)
            sc.constraint = Constraint("drop_outliers", sans(am, amd), (0, {"code": f"import statistics as s\nxs={xs}\n"
                                                                                   "print(round(s.mean(xs),2), s.median(xs))"}))
            sc.meta["violating_payload"] = f"exit_code=0\nstdout:\n{round(am, 2)} {amd}\n"
    else:
        a_, b_ = r.randrange(1000, 99999), r.randrange(2, 97)
        res = a_ * b_ + r.randrange(1, 500)
        add = res - a_ * b_
        goal(sc, "arith", ["What is {a} times {b} plus {c}?", "compute {a}*{b}+{c}", "Quick math: ({a} x {b}) + {c} = ?"],
             ["{a}乘以{b}再加{c}等于多少？", "算一下{a}*{b}+{c}"], a=a_, b=b_, c=add)
        code = f"print({a_}*{b_}+{add})"
        out = f"{res}\n"
        def aans(v: int) -> str:
            return sc.t([f"{a_} × {b_} + {add} = {v:,}.", f"The result is {v}.", f"It comes to {v:,}.", f"= {v}"],
                        [f"{a_}×{b_}+{add}={v}。", f"结果是{v}。", f"答案：{v}。"])

        sc.final_ok = aans(res)
        sc.final_invented = aans(res + r.choice([-1000, 90, 1234, -17]))
    if r.random() < 0.35:
        # a first attempt that crashes and is corrected: genuine self-correction (healthy)
        sc.think(sc.t(["I'll write a quick script.", "Let me compute it."], ["我写个脚本算一下。", "我来计算。"]))
    sc.call("python", {"code": code}, f"exit_code=0\nstdout:\n{out}", key=True,
            thought=sc.t(["Running the calculation in Python.", "Let me verify with code."],
                         ["用Python计算。", "我用代码验证一下。"]) if r.random() < 0.6 else None,
            empty="exit_code=0\nstdout:\n")
    sc.final_empty = sc.t(["The script ran but printed nothing, so I don't have a verified number yet - let me fix "
                           "the print statement.", "My code produced no output; I can't confirm the result."],
                          ["脚本运行了但没有输出，我还没有得到经过验证的结果。", "代码没有产生输出，我无法确认结果。"])
    sc.final_fail = sc.t(["The code execution failed, so I couldn't verify the number.",
                          "The sandbox returned an error; I'd rather not guess the result."],
                         ["代码执行失败了，无法核实结果。", "沙箱返回错误，我不想随意猜测结果。"])


__all__ = ["travel", "retail", "calc_code"]

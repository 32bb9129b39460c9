"""Task families: each writes one healthy run of a tool-using agent into a :class:`Scenario`.

A family picks a task, a goal template (several paraphrases per language; the template id is what
the splits group on), random entities, realistic tool payloads and the answers the run can end
with: ``final_ok`` (grounded in the results), ``final_empty`` (honest: nothing found),
``final_fail`` (honest: the tool failed) and ``final_invented`` (fluent, same phrasing as
``final_ok``, but with facts the run never obtained — what a hallucination looks like).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model.data.datagen.lexicon import COMPANIES, CONDITIONS, PRODUCTS, TOPICS, WEEKDAYS_EN, WEEKDAYS_ZH
from model.data.datagen.scenario import Constraint, Scenario

#: More paraphrases per (family, task): (English, Chinese), appended to the ones written inline.
MORE_GOALS: dict[tuple[str, str], tuple[list[str], list[str]]] = {
    ("search_qa", "founded"): (
        ["Who is the CEO of {co}, and what year did it start?", "Need two facts about {co}: founding year, current boss.",
         "For a slide I'm making: {co} - founded when? led by whom today?", "{co}: establishment year and chief exec?"],
        ["{co}的创立时间和现任掌门人分别是？", "做PPT要用：{co}哪年成立，现在谁是CEO？", "查下{co}：成立年份、现任CEO。"]),
    ("search_qa", "population"): (
        ["roughly how big is {city} population-wise?", "I need an up-to-date population figure for {city}, cited.",
         "What's {city}'s headcount according to the latest census or estimate?"],
        ["{city}大概有多少人口？", "请给我{city}最新的人口数字，并注明出处。", "按最新统计，{city}有多少居民？"]),
    ("search_qa", "market_share"): (
        ["What % of the {prod} market belongs to {co}?", "Is {co} a big player in {prod}? Give me its market share.",
         "market share of {co} in {prod}, latest year available"],
        ["{co}占{prod}市场百分之几？", "{co}在{prod}行业的份额大吗？给个具体数字。"]),
    ("weather", "forecast"): (
        ["Should I expect rain in {city} on {day}?", "Give me the {city} forecast for {day} - high, low, rain.",
         "Planning a picnic in {city} on {day}. What's the weather looking like?",
         "temps + rain chance for {city} on {day}?"],
        ["{day}在{city}野餐合适吗？天气如何？", "给我{city}{day}的最高最低气温和降雨概率。", "{city}{day}天气预报？"]),
    ("travel", "flight"): (
        ["Please get {p} a seat from {a} to {b}, travelling {d}.", "Need a one-way {a}-{b} for {p}, date {d}. Book it.",
         "{p} has to be in {b} on {d}, leaving from {a}. Sort out the flight?"],
        ["{p}需要{d}从{a}飞{b}，帮忙订一下。", "订一张{a}到{b}的单程票，日期{d}，乘机人{p}。"]),
    ("travel", "hotel"): (
        ["Reserve a room in {b} for {p}: {n} nights starting {d}.", "{p} needs accommodation in {b}, {d}, {n} nights.",
         "Please sort out a hotel for {p} in {b} - arriving {d}, staying {n} nights."],
        ["请为{p}预订{b}的住宿，{d}起住{n}晚。", "{p}{d}到{b}出差{n}晚，帮忙订个酒店。"]),
    ("calc_code", "loan"): (
        ["If I borrow {p} at {rate}% for {y} years, how much is each monthly installment?",
         "monthly instalment? {p} principal, {rate}% p.a., {y} years", "Work out the repayment per month: {p}, {rate}%, {y} yrs."],
        ["借{p}，利率{rate}%，分{y}年还，每月要还多少？", "等额本息：本金{p}、年利率{rate}%、{y}年，月供？"]),
    ("calc_code", "stats"): (
        ["Latency samples (ms): {xs}. Mean + median please.", "What's the average and the median of these numbers: {xs}?",
         "stats on {xs}: mean and median"],
        ["延迟样本（毫秒）：{xs}，请给出均值和中位数。", "这组数{xs}的平均数和中位数是多少？"]),
    ("calc_code", "arith"): (
        ["Calculate {a} × {b} + {c}.", "Can you work out {a}*{b} and then add {c}?", "{a} multiplied by {b}, plus {c}?"],
        ["请计算{a}×{b}+{c}。", "{a}乘{b}加上{c}是多少？"]),
    ("retail", "refund"): (
        ["My {p} from order {o} is broken. I want my money back.", "Refund request - order {o} ({p}), it doesn't work.",
         "The {p} I got (order {o}) is defective. Please refund."],
        ["订单{o}里的{p}是坏的，我要退款。", "申请退款：订单{o}，{p}有质量问题。", "{p}（订单{o}）用不了，请退钱。"]),
    ("retail", "address"): (
        ["Please redirect order {o} to {addr}.", "Wrong address on {o} - it should go to {addr}.",
         "Could you update {o} so it ships to {addr}?"],
        ["订单{o}请改寄到{addr}。", "{o}的地址填错了，应该是{addr}。"]),
    ("research", "review"): (
        ["What's the state of the evidence on {t}?", "Pull together the main studies on {t} (since {y}) and summarise.",
         "Give me a short evidence summary on {t} with references.", "Is there a research consensus on {t}?"],
        ["{t}方面的研究证据目前怎样？", "汇总一下{y}年以来关于{t}的主要研究。", "关于{t}，学界有共识吗？请附参考文献。"]),
    ("multi_agent", "data_task"): (
        ["Group task: compute the mean order value for {city}, year {y}, using sales.csv. Verify before answering.",
         "sales.csv -> average order value, city {city}, year {y}. Coder computes, reviewer checks.",
         "We need {city}'s {y} average order value from the sales.csv attachment."],
        ["小组任务：用sales.csv计算{city}{y}年的平均订单金额，回答前请核对。", "请从sales.csv中算出{city}在{y}年的订单均值。"]),
    ("calendar", "schedule"): (
        ["Please put a {m} min {t} on the calendar with {p}, {d}.", "Schedule {t} ({m} minutes) - attendees {p}, date {d}.",
         "Get me {m} minutes with {p} on {d} for a {t}."],
        ["请在{d}安排一个{m}分钟的{t}，参会人{p}。", "和{p}约{d}的{t}，{m}分钟。"]),
    ("sql_analytics", "revenue"): (
        ["How much revenue did {reg} make in Q{q} {y}? Also list the top three products.",
         "Q{q} {y}, {reg}: total sales and best-selling products please.",
         "I need {reg} numbers for Q{q} {y} - revenue plus top 3 SKUs."],
        ["{reg}在{y}年第{q}季度收入多少？再列出前三名产品。", "给我{y}年Q{q}{reg}的销售总额和畅销前三。"]),
}


def _goal(sc: Scenario, task: str, en: list[str], zh: list[str], **slots: Any) -> None:
    more = MORE_GOALS.get((sc.family, task), ([], []))
    en, zh = en + more[0], zh + more[1]
    opts = zh if sc.zh else en
    i = sc.rng.randrange(len(opts))
    sc.task = task
    sc.template = f"{sc.family}.{task}.{sc.lang}{i}"
    sc.goal = opts[i].format(**slots)


def _sys(sc: Scenario, en: list[str], zh: list[str]) -> None:
    sc.system = sc.t(en, zh)


# --------------------------------------------------------------------------- search_qa


SITES = ["en.wikipedia.org", "britannica.com", "reuters.com", "statista.com", "gov.example", "bloomberg.com",
         "forbes.com", "worldbank.org", "citypopulation.de", "idc.com"]


def search_qa(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("web_search", "Search the web; returns ranked snippets.", {"query": "string", "k": "integer"},
            ["query"])
    sc.tool("fetch_page", "Fetch a web page as text.", {"url": "string"}, ["url"])
    _sys(sc, ["You are a research assistant. Use the tools and cite sources.",
              "You answer questions using web search. Be concise and cite the page you used."],
         ["你是一名研究助理，请使用工具回答并注明来源。", "你通过网络搜索回答问题，回答要简洁并注明出处。"])
    comp = r.choice(COMPANIES)
    c = lx.city()
    kind = r.randrange(3)
    year = r.randrange(1952, 2016)
    ceo = lx.person()
    pop = r.randrange(300_000, 14_000_000)
    fake_year = year + r.choice([-7, -3, 4, 9])
    fake_pop = int(pop * r.uniform(0.55, 1.6))
    site = r.choice(SITES)
    url = f"https://{site}/wiki/{(c[0] if kind == 1 else comp[0]).replace(' ', '_')}"
    if kind == 0:
        _goal(sc, "founded", ["When was {co} founded, and who runs it now?",
                              "I need the founding year of {co} and the name of its current CEO.",
                              "quick one: {co} - year founded + current chief executive?",
                              "Can you look up {co}? I want to know when it was established and who leads it."],
              ["{co}是哪一年成立的？现在的CEO是谁？", "帮我查一下{co}的成立年份和现任首席执行官。",
               "请问{co}成立于哪年，目前由谁负责？"], co=lx.pair(comp))
        q = f"{comp[0]} founded year CEO"
        snippet = (f"{comp[0]} was founded in {year}. In {lx.base_date.year - 1} the board appointed "
                   f"{ceo.en} as chief executive.")
        y0 = lx.base_date.year - 1

        def ans0(yr: int, boss: Any, src: str) -> str:
            return sc.t([f"{comp[0]} was founded in {yr}, and its current CEO is {boss.en} (source: {src}).",
                         f"According to {src}, {comp[0]} dates back to {yr}; {boss.en} has led it as CEO since {y0}.",
                         f"Founded: {yr}. Current CEO: {boss.en} ({src}).",
                         f"{comp[0]} was established in {yr}. It is currently run by {boss.en}, per {src}."],
                        [f"{comp[1]}成立于{yr}年，现任CEO是{boss.zh}（来源：{src}）。",
                         f"根据{src}，{comp[1]}创立于{yr}年，自{y0}年起由{boss.zh}担任CEO。",
                         f"成立年份：{yr}年；现任首席执行官：{boss.zh}（{src}）。"])

        sc.final_ok = ans0(year, ceo, site)
        sc.final_invented = ans0(fake_year, lx.person(), r.choice(SITES))
    elif kind == 1:
        _goal(sc, "population", ["What's the current population of {city}?",
                                 "How many people live in {city} these days? Please give a source.",
                                 "Population of {city} (latest estimate)?"],
              ["{city}现在的人口是多少？", "请查一下{city}最新的人口数据，并给出来源。", "{city}常住人口大概多少？"],
              city=lx.cname(c))
        q = f"{c[0]} population latest estimate"
        snippet = f"The population of {c[0]} was estimated at {pop:,} in {lx.base_date.year - 1}."
        y0 = lx.base_date.year - 1

        def ans1(n: int, src: str) -> str:
            return sc.t([f"The latest estimate puts {c[0]}'s population at about {n:,} ({src}).",
                         f"{c[0]} has roughly {n:,} residents according to {src}'s {y0} figure.",
                         f"About {n:,} people ({src}, {y0} estimate).",
                         f"{c[0]}: population ≈ {n:,} as of {y0}, per {src}."],
                        [f"最新估计{c[1]}人口约为{n:,}人（来源：{src}）。",
                         f"根据{src}{y0}年的数据，{c[1]}约有{n:,}人。",
                         f"{c[1]}常住人口约{n:,}人（{src}，{y0}年估计）。"])

        sc.final_ok = ans1(pop, site)
        sc.final_invented = ans1(fake_pop, r.choice(SITES))
    else:
        p = r.choice(PRODUCTS)
        share = r.randrange(8, 41)
        fake_share = share + r.choice([-6, 5, 11])
        _goal(sc, "market_share", ["What market share does {co} have in {prod}?",
                                   "Find {co}'s share of the {prod} market, with the year of the figure.",
                                   "how big is {co} in the {prod} segment (market share %)?"],
              ["{co}在{prod}市场的份额是多少？", "帮我找一下{co}在{prod}领域的市场占有率，以及数据年份。"],
              co=lx.pair(comp), prod=lx.pair(p))
        q = f"{comp[0]} {p[0]} market share"
        snippet = f"{comp[0]} held {share}% of the {p[0]} market in {lx.base_date.year - 1}, up from {share - 2}%."
        y0 = lx.base_date.year - 1

        def ans2(sh: int, src: str) -> str:
            return sc.t([f"{comp[0]} held about {sh}% of the {p[0]} market in {y0} ({src}).",
                         f"Per {src}, {comp[0]}'s share of {p[0]} was {sh}% last year.",
                         f"Roughly {sh}% ({y0}, {src}).",
                         f"{comp[0]} accounts for about {sh}% of {p[0]} sales, according to {src}."],
                        [f"{comp[1]}在{y0}年占{p[1]}市场约{sh}%（来源：{src}）。",
                         f"据{src}，{comp[1]}去年在{p[1]}市场的份额为{sh}%。",
                         f"约{sh}%（{y0}年数据，{src}）。"])

        sc.final_ok = ans2(share, site)
        sc.final_invented = ans2(fake_share, r.choice(SITES))
    results = [{"title": f"{c[0] if kind == 1 else comp[0]} - {site.split('.')[0].title()}", "url": url,
                "snippet": snippet}]
    for _ in range(r.randrange(1, 4)):
        other_c = r.choice(COMPANIES)
        results.append({"title": f"{other_c[0]} annual report", "url": f"https://{other_c[0].split()[0].lower()}"
                        f".example.com/ir", "snippet": f"{other_c[0]} reported revenue growth of "
                        f"{r.randrange(2, 30)}% in fiscal {lx.base_date.year - 1}."})
    r.shuffle(results[1:])
    sc.call("web_search", {"query": q, "k": len(results)}, {"results": results, "total": len(results)},
            thought=sc.t(["Let me search for that.", "I'll look this up.", "Searching the web first."],
                         ["我先搜索一下。", "我来查一下。", "先用网络搜索。"]) if r.random() < 0.7 else None,
            empty={"results": [], "total": 0}, key=True)
    if r.random() < 0.6:
        sc.call("fetch_page", {"url": url}, {"url": url, "status": 200, "text": snippet + " " + r.choice(
            ["The company is headquartered in " + lx.city()[0] + ".", "Figures are unaudited.",
             "Last edited " + lx.fdate(lx.day()) + "."])},
                thought=sc.t(["Opening the top result to confirm.", "Let me read the source page."],
                             ["打开第一个结果确认一下。", "我读一下原始页面。"]))
    sc.final_empty = sc.t(["I searched but couldn't find a reliable figure for this; the search returned no "
                           "relevant results. Could you point me to a source?",
                           "No results came back for that query, so I can't give you a verified answer yet."],
                          ["我搜索了，但没有找到可靠的数据，搜索没有返回相关结果。你能提供一个来源吗？",
                           "这个查询没有返回任何结果，所以我暂时无法给出经过核实的答案。"])
    sc.final_fail = sc.t(["The search tool returned an error, so I couldn't verify this. Want me to try again "
                          "later?", "I wasn't able to complete the lookup: the search service failed."],
                         ["搜索工具返回了错误，我无法核实这个信息。要我稍后再试吗？", "查询没能完成：搜索服务出错了。"])


# --------------------------------------------------------------------------- weather


def weather(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("geocode", "Resolve a place name to coordinates.", {"place": "string"}, ["place"])
    sc.tool("get_forecast", "Daily forecast for coordinates and a date.",
            {"lat": "number", "lon": "number", "date": "string", "units": "string"}, ["lat", "lon", "date"])
    _sys(sc, ["You are a helpful travel and weather assistant.", "You help users plan around the weather."],
         ["你是一个出行和天气助手。", "你帮助用户根据天气做安排。"])
    c = lx.city()
    d = lx.day(1, 10)
    cond = r.choice(CONDITIONS)
    hi = r.randrange(-5, 36)
    lo = hi - r.randrange(3, 12)
    rain = r.randrange(0, 101, 5)
    units_f = (not sc.zh) and r.random() < 0.3
    _goal(sc, "forecast", ["What's the weather going to be like in {city} on {day}?",
                           "Will it rain in {city} on {day}? I'm deciding whether to bring an umbrella.",
                           "forecast for {city}, {day} please",
                           "I'm flying to {city} and land on {day}. How warm will it be?"],
          ["{day}{city}天气怎么样？", "{day}{city}会下雨吗？我在考虑要不要带伞。", "帮我查下{city}{day}的天气预报",
           "我{day}到{city}，那天气温大概多少？"], city=lx.cname(c), day=lx.fdate(d))
    lat, lon = round(r.uniform(-40, 60), 4), round(r.uniform(-120, 150), 4)
    sc.call("geocode", {"place": c[0]}, {"place": c[0], "country": c[2], "lat": lat, "lon": lon},
            thought=sc.t(["First I need the coordinates.", "Looking up the location."],
                         ["先查一下坐标。", "先定位城市。"]) if r.random() < 0.5 else None)
    units = "imperial" if units_f else "metric"

    def deg(x: int) -> str:
        return f"{round(x * 9 / 5 + 32)}°F" if units_f else f"{x}°C"

    fc = {"date": d.isoformat(), "lat": lat, "lon": lon, "units": units,
          "daily": {"condition": cond[0], "temp_max": round(hi * 9 / 5 + 32) if units_f else hi,
                    "temp_min": round(lo * 9 / 5 + 32) if units_f else lo, "precip_prob": rain,
                    "wind_kph": r.randrange(2, 45)}}
    sc.call("get_forecast", {"lat": lat, "lon": lon, "date": d.isoformat(), "units": units}, fc,
            empty={"date": d.isoformat(), "daily": None, "message": "no forecast available for this date"},
            key=True)
    def wans(cd: tuple[str, str], lo_: int, hi_: int, rp: int, fahr: bool) -> str:
        def dg(x: int) -> str:
            return f"{round(x * 9 / 5 + 32)}°F" if fahr else f"{x}°C"

        umb_en = r.choice(["I'd bring an umbrella.", "Pack an umbrella."]) if rp >= 50 else r.choice(
            ["You probably won't need an umbrella.", "An umbrella shouldn't be necessary.", ""])
        umb_zh = r.choice(["建议带伞。", "记得带伞。"]) if rp >= 50 else r.choice(["应该不用带伞。", ""])
        return sc.t([f"In {c[0]} on {lx.fdate(d)}: {cd[0]}, between {dg(lo_)} and {dg(hi_)}, with a {rp}% chance "
                     f"of rain. {umb_en}",
                     f"Expect {cd[0]} weather in {c[0]} - a high of {dg(hi_)}, a low of {dg(lo_)}, and {rp}% chance "
                     f"of precipitation. {umb_en}",
                     f"{lx.fdate(d)} in {c[0]}: {cd[0]}, {dg(lo_)}-{dg(hi_)}, precipitation {rp}%. {umb_en}",
                     f"The forecast for {c[0]} says {cd[0]} with temperatures from {dg(lo_)} to {dg(hi_)}; rain "
                     f"chance {rp}%. {umb_en}"],
                    [f"{lx.fdate(d)}{c[1]}天气{cd[1]}，气温{dg(lo_)}到{dg(hi_)}，降水概率{rp}%。{umb_zh}",
                     f"{c[1]}那天{cd[1]}，最高{dg(hi_)}，最低{dg(lo_)}，降雨概率{rp}%。{umb_zh}",
                     f"预报显示{c[1]}{lx.fdate(d)}{cd[1]}，{dg(lo_)}~{dg(hi_)}，降水概率{rp}%。{umb_zh}"]).strip()

    sc.final_ok = wans(cond, lo, hi, rain, units_f)
    fh = hi + r.choice([-9, -5, 6, 10])
    sc.final_invented = wans(r.choice(CONDITIONS), fh - r.randrange(3, 10), fh, r.randrange(0, 101, 10), units_f)
    sc.final_empty = sc.t([f"The forecast service has no data for {c[0]} on that date yet (it's probably too far "
                           "out). I can check again closer to the day.",
                           "I couldn't get a forecast for that date; the service returned nothing."],
                          [f"天气服务暂时没有{c[1]}那天的预报（可能日期太远）。我可以临近时再查。",
                           "没能拿到那天的预报，服务没有返回数据。"])
    sc.final_fail = sc.t(["The weather service failed when I requested the forecast, so I can't tell you yet.",
                          "Sorry - the forecast API returned an error. Please try again in a bit."],
                         ["请求天气预报时服务出错了，暂时无法告诉你结果。", "天气接口返回了错误，请稍后再试。"])
    if units_f and r.random() < 0.5:
        pass
    elif not units_f and r.random() < 0.45:
        # the goal asks for Fahrenheit / the answer keeps Celsius: an earlier constraint forgotten
        sc.goal += sc.t([" Please give temperatures in Fahrenheit.", " (Fahrenheit please, I'm American.)"],
                        ["请用华氏度告诉我。", "温度请用华氏度表示。"])
        sc.final_ok = wans(cond, lo, hi, rain, True)
        sc.final_invented = wans(r.choice(CONDITIONS), fh - r.randrange(3, 10), fh, r.randrange(0, 101, 10), True)
        sc.constraint = Constraint("fahrenheit", wans(cond, lo, hi, rain, False))
    if r.random() < 0.3:
        # a second day: longer traces
        d2 = lx.day(10, 14)
        sc.call("get_forecast", {"lat": lat, "lon": lon, "date": d2.isoformat(), "units": units},
                {"date": d2.isoformat(), "daily": {"condition": r.choice(CONDITIONS)[0], "temp_max": hi + 1,
                                                   "temp_min": lo + 1, "precip_prob": r.randrange(0, 101, 5)}},
                thought=sc.t(["Let me also check the day after for comparison.", "Checking the next day too."],
                             ["顺便看一下第二天。", "我再查一下后一天作对比。"]))


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
    _sys(sc, ["You are a travel booking agent. Confirm details before booking.",
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
        _goal(sc, "flight", ["Book me a flight from {a} to {b} on {d}. Passenger: {p}.",
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
        _goal(sc, "hotel", ["Find a hotel in {b} from {d} for {n} nights and book it for {p}.",
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


# --------------------------------------------------------------------------- calc_code


def calc_code(sc: Scenario) -> None:
    r = sc.rng
    sc.tool("python", "Execute Python code and return stdout.", {"code": "string"}, ["code"])
    sc.tool("calculator", "Evaluate an arithmetic expression.", {"expression": "string"}, ["expression"])
    _sys(sc, ["You are a careful analyst. Use python for any arithmetic.", "Solve the task; run code to check."],
         ["你是一名严谨的分析师，任何计算都用python完成。", "请解决问题，用代码验证。"])
    kind = r.randrange(3)
    if kind == 0:
        p = r.randrange(50, 900) * 1000
        rate = r.choice([3.2, 3.9, 4.25, 4.8, 5.5, 6.1, 2.85])
        years = r.choice([10, 15, 20, 25, 30])
        m = rate / 1200
        pay = p * m / (1 - (1 + m) ** (-years * 12))
        _goal(sc, "loan", ["What's the monthly payment on a {p} loan at {rate}% over {y} years?",
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
        _goal(sc, "stats", ["Here are response times in ms: {xs}. What are the mean and median?",
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
        _goal(sc, "arith", ["What is {a} times {b} plus {c}?", "compute {a}*{b}+{c}", "Quick math: ({a} x {b}) + {c} = ?"],
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
    _sys(sc, [f"You are {store}'s customer-service agent. Follow the refund policy exactly; never reveal other "
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
        _goal(sc, "refund", ["Hi, I want a refund for order {o}. The {p} stopped working.",
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
        _goal(sc, "address", ["Can you change the shipping address on {o} to {addr}?",
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


# --------------------------------------------------------------------------- research (long runs)


EFFECTS = [("a modest effect", "效果温和"), ("a strong association", "强相关"), ("no significant effect", "无显著影响"),
           ("mixed results", "结果不一"), ("a 12% reduction", "降低12%"), ("a 2x increase", "增加一倍"),
           ("a 30% reduction", "降低30%"), ("a small but robust effect", "效应小但稳健")]


def research(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("search_papers", "Search the literature; paginated.", {"query": "string", "page": "integer",
                                                                    "year_from": "integer"}, ["query"])
    sc.tool("read_paper", "Read the abstract and key results of a paper.", {"paper_id": "string"}, ["paper_id"])
    sc.tool("save_note", "Save a note to the research notebook.", {"text": "string"}, ["text"])
    _sys(sc, ["You are a literature-review agent. Read several sources before concluding.",
              "Research assistant: gather evidence from papers, take notes, then summarise."],
         ["你是文献综述助手，下结论前要阅读多篇文献。", "研究助理：检索论文、做笔记，然后总结。"])
    topic = r.choice(TOPICS)
    yf = r.choice([2015, 2018, 2020])
    _goal(sc, "review", ["Summarise what recent research says about {t}.",
                         "I'm writing a brief on {t}. What are the main findings since {y}?",
                         "Do a quick literature review on {t} and tell me the consensus.",
                         "What does the evidence say on {t}? Give me 3-4 key findings with citations."],
          ["总结一下关于{t}的最新研究结论。", "我在写一份关于{t}的简报，{y}年以来的主要发现有哪些？", "请对{t}做一个简短的文献综述。"],
          t=lx.pair(topic), y=yf)
    if r.random() < 0.4:
        sc.goal += sc.t([f" Only use studies published in {yf} or later.", f" Ignore anything before {yf}."],
                        [f"只使用{yf}年及以后发表的研究。", f"{yf}年之前的不要用。"])
        sc.meta["year_from"] = yf
    pages = r.randrange(1, 6)
    found: list[dict[str, Any]] = []
    first = True
    for pg in range(1, pages + 1):
        papers = []
        for _ in range(r.randrange(2, 5)):
            au = lx.person().en.split()[1]
            papers.append({"paper_id": lx.ident("P", 6), "title": f"{r.choice(['Evidence on', 'Revisiting', 'A cohort study of', 'Modelling', 'Measuring'])} "
                           f"{topic[0]}", "authors": f"{au} et al.", "year": r.randrange(yf - 6, 2025),
                           "citations": r.randrange(0, 900)})
        found += papers
        sc.call("search_papers", {"query": topic[0], "page": pg, "year_from": yf},
                {"page": pg, "total_pages": pages, "results": papers},
                key=first, empty={"page": pg, "total_pages": 0, "results": []},
                thought=sc.t([f"Fetching page {pg} of results." if pg > 1 else "Starting with a literature search.",
                              "Next page." if pg > 1 else "Searching papers."],
                             [f"获取第{pg}页结果。" if pg > 1 else "先做文献检索。", "下一页。" if pg > 1 else "检索论文。"])
                if r.random() < 0.6 else None)
        first = False
    recent = [p for p in found if p["year"] >= yf] or found[:1]
    reads = r.sample(recent, min(len(recent), r.randrange(2, 6)))
    findings = []
    for p in reads:
        eff, eff_zh = r.choice(EFFECTS)
        n = r.randrange(40, 50000)
        sc.call("read_paper", {"paper_id": p["paper_id"]},
                {"paper_id": p["paper_id"], "title": p["title"], "year": p["year"],
                 "abstract": f"We study {topic[0]} using data from {n} participants/sites and find {eff}.",
                 "n": n})
        findings.append((p, eff, eff_zh, n))
        if r.random() < 0.5:
            sc.call("save_note", {"text": f"{p['authors']} ({p['year']}): {eff}, n={n}"}, {"saved": True,
                                                                                       "note_id": r.randrange(1, 999)})
    effects = EFFECTS
    verdict = r.randrange(3)

    def resans(items: list[tuple[str, int, str, str, int]]) -> str:
        en = "; ".join(f"{a} {y} report {e} (n={n})" for a, y, e, _, n in items)
        zh = "；".join(f"{a}（{y}）发现{z}（样本{n}）" for a, y, _, z, n in items)
        ve = ["suggestive but not conclusive", "fairly consistent", "still mixed"][verdict]
        vz = ["有提示性但尚不确定", "较为一致", "仍有分歧"][verdict]
        return sc.t([f"Here is what the recent literature on {topic[0]} says: {en}. Overall the evidence is {ve}.",
                     f"Key findings on {topic[0]} - {en}.",
                     f"I read {len(items)} studies. {en}. My read: the evidence is {ve}.",
                     f"Summary ({topic[0]}): {en}."],
                    [f"关于{topic[1]}的近期研究：{zh}。总体来看证据{vz}。", f"{topic[1]}的主要发现：{zh}。",
                     f"我阅读了{len(items)}篇研究：{zh}。总体判断：证据{vz}。"])

    items = [(p["authors"], p["year"], eff, eff_zh, n) for p, eff, eff_zh, n in findings]
    sc.final_ok = resans(items)
    fakes = []
    for _ in range(len(items)):
        e = r.choice(effects)
        fakes.append((f"{lx.person().en.split()[1]} et al.", r.randrange(yf, 2025), e[0], e[1], r.randrange(50, 9000)))
    sc.final_invented = resans(fakes)
    old = [p for p in found if p["year"] < yf]
    if "year_from" in sc.meta and old:
        p = old[0]
        e = r.choice(effects)
        sc.constraint = Constraint("year_from", resans([(p["authors"], p["year"], e[0], e[1], r.randrange(40, 9000))]
                                                       + items))
    sc.final_empty = sc.t([f"The search returned no papers on {topic[0]}, so I can't summarise the evidence. Try a "
                           "broader query?", "I found nothing relevant in the literature index for that query."],
                          [f"没有检索到关于{topic[1]}的论文，无法总结。要不要换个更宽泛的检索词？", "文献库里没有找到相关结果。"])
    sc.final_fail = sc.t(["The paper search service failed, so this review is incomplete; I'd rather not summarise "
                          "from memory.", "I couldn't retrieve the papers (service error)."],
                         ["论文检索服务出错，综述不完整，我不想凭记忆总结。", "无法获取论文（服务错误）。"])


# --------------------------------------------------------------------------- multi_agent


def multi_agent(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    roles = r.choice([("Planner", "Coder", "Reviewer"), ("Orchestrator", "WebSurfer", "Assistant"),
                      ("Manager", "DataAnalysis_Expert", "Verification_Expert")])
    sc.speakers = {roles[0]: "assistant", roles[1]: "assistant", roles[2]: "assistant",
                   "Computer_terminal": "tool"}
    sc.tool("execute_code", "Run code in the terminal.", {"code": "string", "lang": "string"}, ["code"])
    sc.tool("web_search", "Search the web.", {"query": "string"}, ["query"])
    sc.agent = roles[0]
    _sys(sc, [f"You are {roles[0]}, coordinating {roles[1]} and {roles[2]}. Hand off sub-tasks and verify results.",
              "Group chat manager: plan, delegate, verify, then answer."],
         [f"你是{roles[0]}，协调{roles[1]}和{roles[2]}，分派子任务并核对结果。", "群聊管理者：规划、分派、核对，然后作答。"])
    c = lx.city()
    year = r.randrange(2015, 2024)
    n_rows = r.randrange(120, 5000)
    val = round(r.uniform(2, 40), 1)
    _goal(sc, "data_task", ["Using the attached sales.csv, what was the average order value in {city} in {y}?",
                            "Team: figure out the average order value for {city} customers in {y} from sales.csv.",
                            "From sales.csv compute {city}'s {y} average order value and double-check it."],
          ["根据附件sales.csv，{y}年{city}的平均订单金额是多少？", "团队任务：从sales.csv算出{y}年{city}客户的平均订单金额，并复核。"],
          city=lx.cname(c), y=year)
    sc.say(sc.t([f"Plan: 1) {roles[1]} loads sales.csv and filters city={c[0]}, year={year}; 2) compute the mean "
                 f"of order_value; 3) {roles[2]} verifies.", f"{roles[1]}, please load the data and compute the "
                 f"average for {c[0]} in {year}. {roles[2]} will check."],
                [f"计划：1）{roles[1]}读取sales.csv并筛选城市={c[1]}、年份={year}；2）计算order_value均值；3）{roles[2]}复核。",
                 f"{roles[1]}请读取数据并计算{c[1]}{year}年的平均值，{roles[2]}负责核对。"]), speaker=roles[0])
    code1 = ("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.columns.tolist(), len(df))")
    sc.call("execute_code", {"code": code1, "lang": "python"},
            f"exitcode: 0 (execution succeeded)\nCode output: ['order_id', 'city', 'year', 'status', 'order_value'] "
            f"{n_rows}\n",
            speaker=roles[1], thought=sc.t(["Loading the file first.", "Let me inspect the columns."],
                                           ["先读取文件。", "先看看有哪些列。"]))
    code2_all = (f"sub = df[(df.city == '{c[0]}') & (df.year == {year})]\nprint(len(sub), "
                 "round(sub.order_value.mean(), 1))")
    k = r.randrange(5, n_rows // 4)
    excl = r.random() < 0.4
    k_all, val_all = k, val
    code2 = code2_all
    if excl:
        sc.goal += sc.t([" Exclude cancelled orders.", " Cancelled orders must not count."],
                        ["不要计入已取消的订单。", "已取消的订单不算。"])
        code2 = (f"sub = df[(df.city == '{c[0]}') & (df.year == {year}) & (df.status != 'cancelled')]\n"
                 "print(len(sub), round(sub.order_value.mean(), 1))")
        k_all, val_all = k + r.randrange(3, 40), round(val * r.uniform(0.8, 0.97), 1)
    c2_no = sc.n_calls
    sc.call("execute_code", {"code": code2, "lang": "python"},
            f"exitcode: 0 (execution succeeded)\nCode output: {k} {val}\n", speaker=roles[1], key=True,
            empty="exitcode: 0 (execution succeeded)\nCode output: 0 nan\n")
    sc.say(sc.t([f"{k} orders match; the mean order value is {val}. Handing over to {roles[2]}.",
                 f"Result: mean={val} over {k} rows. {roles[2]}, please verify."],
                [f"符合条件的订单有{k}条，平均订单金额为{val}。交给{roles[2]}核对。", f"结果：{k}行，均值={val}。请{roles[2]}核对。"]),
           speaker=roles[1])
    sc.beats[-1].key = True
    sc.meta["violating_say"] = sc.t([f"{k_all} orders match; the mean order value is {val_all}. Handing over to "
                                     f"{roles[2]}."], [f"符合条件的订单有{k_all}条，平均订单金额为{val_all}。交给{roles[2]}核对。"])
    if r.random() < 0.5:
        sc.call("execute_code", {"code": code2.replace("print(", "print('check', "), "lang": "python"},
                f"exitcode: 0 (execution succeeded)\nCode output: check {k} {val}\n", speaker=roles[2],
                thought=sc.t(["Re-running the filter independently.", "Verifying."], ["独立复算一遍。", "核对中。"]))
    sc.say(sc.t(["Verified, the numbers match.", "I confirm the computation."], ["核对无误。", "确认计算正确。"]),
           speaker=roles[2])
    def mans(v: float, rows: int) -> str:
        return sc.t([f"The average order value in {c[0]} in {year} was {v} (from {rows} orders).",
                     f"Answer: {v} - the mean order value for {c[0]} in {year}, verified by {roles[2]}.",
                     f"Final: {v} average across {rows} {c[0]} orders in {year}.",
                     f"{c[0]}, {year}: mean order value {v} (n={rows}), double-checked."],
                    [f"{year}年{c[1]}的平均订单金额为{v}（共{rows}笔订单）。", f"答案：{v}，即{c[1]}{year}年的平均订单金额，已由{roles[2]}核对。",
                     f"最终结果：{c[1]}{year}年平均订单金额{v}（样本{rows}笔），已复核。"])

    sc.final_ok = mans(val, k)
    sc.final_invented = mans(round(val * r.uniform(0.6, 1.5), 1), r.randrange(20, 300))
    if excl:
        sc.constraint = Constraint("exclude_cancelled", mans(val_all, k_all),
                                   (c2_no, {"code": code2_all, "lang": "python"}))
        sc.meta["violating_payload"] = f"exitcode: 0 (execution succeeded)\nCode output: {k_all} {val_all}\n"
    sc.final_empty = sc.t([f"There are no {c[0]} orders for {year} in sales.csv, so the average is undefined.",
                           "The filter matched zero rows; we can't compute an average."],
                          [f"sales.csv中没有{c[1]}{year}年的订单，平均值无法计算。", "筛选结果为0行，无法计算平均值。"])
    sc.final_fail = sc.t(["Code execution failed, so we don't have a verified figure.",
                          "The terminal errored out; no result yet."], ["代码执行失败，没有得到经过核对的数字。", "终端报错，暂无结果。"])
    sc.agent = roles[0]


# --------------------------------------------------------------------------- calendar


def calendar(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("list_events", "List calendar events for a person and a day.", {"person": "string", "date": "string"},
            ["person", "date"])
    sc.tool("find_free_slots", "Common free slots of attendees.", {"attendees": "array", "date": "string",
                                                                    "duration_min": "integer"},
            ["attendees", "date", "duration_min"])
    sc.tool("create_event", "Create a meeting and invite attendees.", {"title": "string", "start": "string",
                                                                        "duration_min": "integer",
                                                                        "attendees": "array"},
            ["title", "start", "attendees"])
    _sys(sc, ["You are a scheduling assistant with access to the team calendar.", "Schedule meetings for the user."],
         ["你是日程助手，可以访问团队日历。", "帮用户安排会议。"])
    ppl = [lx.person() for _ in range(r.randrange(2, 5))]
    d = lx.day(1, 20)
    dur = r.choice([30, 45, 60])
    wd = d.weekday()
    topic = r.choice([("Q3 planning", "三季度规划"), ("design review", "设计评审"), ("1:1", "一对一沟通"),
                      ("vendor call", "供应商电话会"), ("incident retro", "故障复盘")])
    _goal(sc, "schedule", ["Set up a {m}-minute {t} with {p} on {d}.",
                           "Find a time on {d} for a {t} ({m} min) with {p} and send the invite.",
                           "can you book {m} min with {p} {d} for the {t}?"],
          ["帮我和{p}在{d}约一个{m}分钟的{t}。", "{d}找个时间和{p}开{m}分钟的{t}，并发送邀请。"],
          m=dur, t=lx.pair(topic), p=("、" if sc.zh else ", ").join(lx.name(p) for p in ppl), d=lx.fdate(d))
    slots = sorted({f"{h:02d}:{mm}" for h, mm in ((r.randrange(8, 18), r.choice(["00", "30"])) for _ in range(4))})
    morning = [s for s in slots if int(s[:2]) < 10]
    later = [s for s in slots if int(s[:2]) >= 10] or ["14:00"]
    if not morning:
        morning = ["09:00"]
        slots = sorted(set(slots) | {"09:00"})
    slots = sorted(set(slots) | set(later))
    if r.random() < 0.5:
        sc.call("list_events", {"person": ppl[0].en, "date": d.isoformat()},
                {"events": [{"title": r.choice(["standup", "lunch", "focus time", "interview"]),
                             "start": f"{r.randrange(8, 17):02d}:00", "duration_min": 30} for _ in range(r.randrange(1, 4))]})
    sc.call("find_free_slots", {"attendees": [p.email for p in ppl], "date": d.isoformat(), "duration_min": dur},
            {"date": d.isoformat(), "slots": slots, "timezone": r.choice(["Europe/Berlin", "Asia/Shanghai",
                                                                         "America/New_York"])},
            key=True, empty={"date": d.isoformat(), "slots": []},
            thought=sc.t(["Checking everyone's availability.", "Looking for a common slot."],
                         ["查看大家的空闲时间。", "找一个共同空闲的时段。"]) if r.random() < 0.6 else None)
    # the constraint is decided first: without it any common slot will do, mornings included
    constrained = r.random() < 0.45
    pick = later[0] if constrained else r.choice(slots)
    cid = sc.call("create_event", {"title": topic[0], "start": f"{d.isoformat()}T{pick}", "duration_min": dur,
                                   "attendees": [p.email for p in ppl]},
                  {"event_id": lx.ident("evt_", 8, digits=False), "status": "invites_sent"})
    wdn = WEEKDAYS_ZH[wd] if sc.zh else WEEKDAYS_EN[wd]
    def cans(at: str) -> str:
        return sc.t([f"Booked the {topic[0]} on {wdn} {lx.fdate(d)} at {at} for {dur} minutes; invites went to "
                     f"{', '.join(p.en for p in ppl)}.", f"Done - {at} on {lx.fdate(d)} worked for everyone. Invites "
                     "are out.", f"Scheduled: {topic[0]}, {lx.fdate(d)} {at} ({dur} min). Everyone's invited.",
                     f"The {topic[0]} is on the calendar for {wdn} at {at}."],
                    [f"已安排{lx.fdate(d)}（{wdn}）{at}的{topic[1]}，时长{dur}分钟，邀请已发给{'、'.join(p.zh for p in ppl)}。",
                     f"好了，{lx.fdate(d)} {at}大家都有空，邀请已发出。", f"已预约：{topic[1]}，{lx.fdate(d)} {at}，{dur}分钟。"])

    sc.final_ok = cans(pick)
    sc.final_invented = cans(f"{r.randrange(9, 17):02d}:{r.choice(['00', '30'])}")
    if constrained:
        sc.goal += sc.t([" Nothing before 10am please.", " Not before 10:00 - I have school drop-off."],
                        ["上午10点之前不行。", "请不要安排在10点以前。"])
        bad = morning[0]
        sc.constraint = Constraint("not_before_10", cans(bad),
                                   (cid, {"title": topic[0], "start": f"{d.isoformat()}T{bad}", "duration_min": dur,
                                          "attendees": [p.email for p in ppl]}))
    sc.meta["dependent_call"] = cid
    sc.final_empty = sc.t([f"There's no common free slot on {lx.fdate(d)}. Want me to look at the next day?",
                           "Nobody has a shared opening that day, so I haven't sent anything."],
                          [f"{lx.fdate(d)}没有大家都空闲的时段，要看看第二天吗？", "那天没有共同空闲时间，我没有发邀请。"])
    sc.final_fail = sc.t(["The calendar service returned an error, so no meeting was created.",
                          "I couldn't reach the calendar API; nothing has been scheduled."],
                         ["日历服务返回错误，会议没有创建。", "无法连接日历接口，尚未安排。"])


# --------------------------------------------------------------------------- sql_analytics


def sql_analytics(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("describe_table", "Columns of a table.", {"table": "string"}, ["table"])
    sc.tool("run_sql", "Run a read-only SQL query.", {"query": "string", "limit": "integer"}, ["query"])
    _sys(sc, ["You are a data analyst with read-only access to the warehouse.", "Answer questions with SQL."],
         ["你是数据分析师，对数据仓库有只读权限。", "用SQL回答问题。"])
    region = r.choice([("EMEA", "欧洲中东非洲"), ("APAC", "亚太"), ("North America", "北美"), ("LATAM", "拉美")])
    q = r.randrange(1, 5)
    yr = r.randrange(2021, 2025)
    rev = r.randrange(200_000, 9_000_000)
    top = [(lx.pair(p), r.randrange(1000, 90000)) for p in r.sample(PRODUCTS, 3)]
    top.sort(key=lambda x: -x[1])
    _goal(sc, "revenue", ["What was total revenue in {reg} for Q{q} {y}, and the top 3 products?",
                          "Pull Q{q} {y} revenue for {reg} plus the three best-selling products.",
                          "Need numbers: {reg}, Q{q} {y} - revenue and top products."],
          ["{y}年第{q}季度{reg}的总收入是多少？前三名产品是哪些？", "查一下{reg}{y}年Q{q}的收入和销量前三的产品。"],
          reg=lx.pair(region), q=q, y=yr)
    if r.random() < 0.5:
        sc.call("describe_table", {"table": "sales"}, {"table": "sales", "columns": [
            {"name": "order_id", "type": "bigint"}, {"name": "region", "type": "text"}, {"name": "product", "type":
            "text"}, {"name": "amount", "type": "numeric"}, {"name": "is_refund", "type": "boolean"},
            {"name": "order_date", "type": "date"}]})
    excl = r.random() < 0.45
    where = f"region = '{region[0]}' AND order_date >= '{yr}-{3 * q - 2:02d}-01' AND order_date < " \
            f"'{yr if q < 4 else yr + 1}-{(3 * q + 1) if q < 4 else 1:02d}-01'"
    if excl:
        sc.goal += sc.t([" Exclude refunds.", " Refunds should not count."], ["不要计入退款。", "退款不算在内。"])
        where_ok = where + " AND NOT is_refund"
    else:
        where_ok = where
    sc.call("run_sql", {"query": f"SELECT SUM(amount) FROM sales WHERE {where_ok}"},
            {"columns": ["sum"], "rows": [[rev]], "row_count": 1}, key=True,
            empty={"columns": ["sum"], "rows": [[None]], "row_count": 1},
            thought=sc.t(["Querying total revenue.", "First the total."], ["先查总收入。", "先算总额。"])
            if r.random() < 0.6 else None)
    sc.call("run_sql", {"query": f"SELECT product, SUM(amount) s FROM sales WHERE {where_ok} GROUP BY 1 ORDER BY 2 "
                                 "DESC LIMIT 3"},
            {"columns": ["product", "s"], "rows": [[p, v] for p, v in top], "row_count": 3})
    tops = ", ".join(f"{p} ({v:,})" for p, v in top)
    tops_zh = "、".join(f"{p}（{v:,}）" for p, v in top)

    def qans(total: int) -> str:
        return sc.t([f"Q{q} {yr} revenue in {region[0]} was {total:,}. Top products: {tops}.",
                     f"{region[0]} brought in {total:,} in Q{q} {yr}; the leaders were {tops}.",
                     f"Revenue ({region[0]}, Q{q} {yr}): {total:,}. Best sellers: {tops}.",
                     f"Total for the quarter: {total:,}. Top 3 by revenue - {tops}."],
                    [f"{yr}年Q{q}{region[1]}总收入为{total:,}，前三名产品：{tops_zh}。",
                     f"{region[1]}{yr}年第{q}季度收入{total:,}，销量前三：{tops_zh}。",
                     f"本季度总收入{total:,}；收入前三的产品：{tops_zh}。"])

    sc.final_ok = qans(rev)
    sc.final_invented = qans(int(rev * r.uniform(0.5, 1.6)))
    if excl:
        gross = int(rev * r.uniform(1.04, 1.15))
        sc.constraint = Constraint("exclude_refunds", qans(gross),
                                   (sc.n_calls - 2, {"query": f"SELECT SUM(amount) FROM sales WHERE {where}"}))
        sc.meta["violating_payload"] = {"columns": ["sum"], "rows": [[gross]], "row_count": 1}
    sc.final_empty = sc.t([f"The query returned no revenue for {region[0]} in Q{q} {yr} - the table may not be loaded "
                           "for that quarter yet.", "No rows matched, so I can't report a figure."],
                          [f"查询没有返回{region[1]}{yr}年Q{q}的收入数据，可能该季度数据尚未入库。", "没有匹配的数据，无法给出数字。"])
    sc.final_fail = sc.t(["The warehouse query failed, so I don't have the numbers.", "The SQL engine returned an "
                          "error; I'll need to retry."], ["数据仓库查询失败，暂时拿不到数字。", "SQL引擎报错，需要重试。"])


FAMILIES: dict[str, Callable[[Scenario], None]] = {
    "search_qa": search_qa,
    "weather": weather,
    "travel": travel,
    "calc_code": calc_code,
    "retail": retail,
    "research": research,
    "multi_agent": multi_agent,
    "calendar": calendar,
    "sql_analytics": sql_analytics,
}

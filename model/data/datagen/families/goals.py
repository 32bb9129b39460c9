"""What every family shares: the goal paraphrases (:data:`MORE_GOALS` beside each family's inline ones),
:func:`goal` that picks one and names its template (what the splits group on), :func:`system_prompt`.
"""

from __future__ import annotations

from typing import Any

from model.data.datagen.scenario import Scenario

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


def goal(sc: Scenario, task: str, en: list[str], zh: list[str], **slots: Any) -> None:
    """Set the task, one of its goal paraphrases (inline ones plus :data:`MORE_GOALS`) and the template id."""
    more = MORE_GOALS.get((sc.family, task), ([], []))
    en, zh = en + more[0], zh + more[1]
    opts = zh if sc.zh else en
    i = sc.rng.randrange(len(opts))
    sc.task = task
    sc.template = f"{sc.family}.{task}.{sc.lang}{i}"
    sc.goal = opts[i].format(**slots)


def system_prompt(sc: Scenario, en: list[str], zh: list[str]) -> None:
    """One of the system prompts, in the scenario's language."""
    sc.system = sc.t(en, zh)


__all__ = ["MORE_GOALS", "goal", "system_prompt"]

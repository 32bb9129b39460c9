"""Random entities for the generator, in English and Chinese: people, places, products, dates, ids.

Everything is drawn from a seeded :class:`random.Random`, so a trace is a pure function of its seed.
Pools are deliberately broad (many names, cities, products) so that a model cannot win by
memorising entities.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from datetime import date, timedelta

FIRST_EN = ["Alice", "Bob", "Carla", "Dmitri", "Emeka", "Fatima", "Gustavo", "Hana", "Ivan", "Jun", "Keiko", "Liam", "Maya", "Nikhil", "Olga", "Pedro", "Quinn", "Rosa", "Sanjay", "Tomas", "Uma", "Victor", "Wen", "Ximena", "Yusuf", "Zoe", "Aaron", "Bianca", "Chloe", "Diego", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kofi", "Lena", "Marco", "Nadia", "Oscar", "Priya", "Rahul", "Sofia", "Theo", "Ulla", "Vera", "Will"]
LAST_EN = ["Smith", "Garcia", "Chen", "Okafor", "Novak", "Rossi", "Tanaka", "Muller", "Kowalski", "Haddad", "Silva", "Johansson", "Nguyen", "Patel", "Brown", "Dubois", "Ivanova", "Kim", "Larsen", "Moreau", "Ortiz", "Petrov", "Quinn", "Reyes", "Schmidt", "Turner", "Yilmaz", "Zhang"]
SURNAME_ZH = list("王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾")
GIVEN_ZH = ["伟", "芳", "娜", "敏", "静", "丽", "强", "磊", "军", "洋", "勇", "艳", "杰", "娟", "涛", "明", "超", "秀英", "霞", "平", "刚", "桂英", "晨", "浩然", "子涵", "雨桐", "欣怡", "梓轩", "一诺", "思远", "嘉怡", "宇航", "晓峰", "佳琪", "文博", "若曦"]

CITIES = [
    ("Paris", "巴黎", "FR", "CDG"), ("Tokyo", "东京", "JP", "HND"), ("Berlin", "柏林", "DE", "BER"),
    ("Madrid", "马德里", "ES", "MAD"), ("Toronto", "多伦多", "CA", "YYZ"), ("Sydney", "悉尼", "AU", "SYD"),
    ("Singapore", "新加坡", "SG", "SIN"), ("Shanghai", "上海", "CN", "PVG"), ("Beijing", "北京", "CN", "PEK"),
    ("Chengdu", "成都", "CN", "TFU"), ("Shenzhen", "深圳", "CN", "SZX"), ("Hangzhou", "杭州", "CN", "HGH"),
    ("Seoul", "首尔", "KR", "ICN"), ("Bangkok", "曼谷", "TH", "BKK"), ("Istanbul", "伊斯坦布尔", "TR", "IST"),
    ("Lisbon", "里斯本", "PT", "LIS"), ("Rome", "罗马", "IT", "FCO"), ("Vienna", "维也纳", "AT", "VIE"),
    ("Prague", "布拉格", "CZ", "PRG"), ("Dublin", "都柏林", "IE", "DUB"), ("Chicago", "芝加哥", "US", "ORD"),
    ("Seattle", "西雅图", "US", "SEA"), ("Boston", "波士顿", "US", "BOS"), ("Denver", "丹佛", "US", "DEN"),
    ("Mexico City", "墨西哥城", "MX", "MEX"), ("Lima", "利马", "PE", "LIM"), ("Nairobi", "内罗毕", "KE", "NBO"),
    ("Cairo", "开罗", "EG", "CAI"), ("Dubai", "迪拜", "AE", "DXB"), ("Mumbai", "孟买", "IN", "BOM"),
    ("Oslo", "奥斯陆", "NO", "OSL"), ("Helsinki", "赫尔辛基", "FI", "HEL"), ("Zurich", "苏黎世", "CH", "ZRH"),
    ("Osaka", "大阪", "JP", "KIX"), ("Hong Kong", "香港", "HK", "HKG"), ("Taipei", "台北", "TW", "TPE"),
    ("Kunming", "昆明", "CN", "KMG"), ("Xi'an", "西安", "CN", "XIY"), ("Wuhan", "武汉", "CN", "WUH"),
    ("Auckland", "奥克兰", "NZ", "AKL"),
]

PRODUCTS = [
    ("wireless earbuds", "无线耳机"), ("standing desk", "升降桌"), ("espresso machine", "意式咖啡机"),
    ("hiking backpack", "登山背包"), ("mechanical keyboard", "机械键盘"), ("air purifier", "空气净化器"),
    ("running shoes", "跑鞋"), ("smart watch", "智能手表"), ("rice cooker", "电饭煲"),
    ("office chair", "办公椅"), ("4K monitor", "4K显示器"), ("robot vacuum", "扫地机器人"),
    ("electric kettle", "电热水壶"), ("yoga mat", "瑜伽垫"), ("bluetooth speaker", "蓝牙音箱"),
    ("winter jacket", "羽绒服"), ("tablet stand", "平板支架"), ("camping tent", "帐篷"),
    ("blender", "破壁机"), ("e-reader", "电子书阅读器"), ("desk lamp", "台灯"), ("phone case", "手机壳"),
]

TOPICS = [
    ("solid-state batteries", "固态电池"), ("urban heat islands", "城市热岛效应"),
    ("microplastics in drinking water", "饮用水中的微塑料"), ("remote work productivity", "远程办公效率"),
    ("coral reef bleaching", "珊瑚白化"), ("small language models", "小型语言模型"),
    ("carbon capture costs", "碳捕集成本"), ("sleep and memory", "睡眠与记忆"),
    ("vertical farming", "垂直农业"), ("antibiotic resistance", "抗生素耐药性"),
    ("high-speed rail ridership", "高铁客流量"), ("lithium supply chains", "锂供应链"),
    ("four-day work week trials", "四天工作制试点"), ("heat pump adoption", "热泵普及"),
    ("river delta subsidence", "河口三角洲沉降"), ("open-source licensing", "开源许可证"),
    ("childhood myopia", "儿童近视"), ("green hydrogen", "绿氢"), ("urban cycling safety", "城市骑行安全"),
    ("wildfire smoke exposure", "山火烟雾暴露"),
]

COMPANIES = [
    ("Northwind Traders", "北风贸易"), ("Acme Logistics", "顶点物流"), ("Bluepeak Analytics", "蓝峰数据"),
    ("Helios Energy", "赫利俄斯能源"), ("Orchid Retail", "兰花零售"), ("Quantum Foods", "量子食品"),
    ("Redwood Health", "红杉健康"), ("Silverline Bank", "银线银行"), ("Tidewater Media", "潮水传媒"),
    ("Vertex Robotics", "顶峰机器人"), ("Maple Insurance", "枫叶保险"), ("Lumen Labs", "流明实验室"),
]

WEEKDAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS_ZH = ["周一", "周二", "周三", "周四", "周五", "周六", "周日"]

CONDITIONS = [
    ("sunny", "晴"), ("partly cloudy", "多云"), ("overcast", "阴"), ("light rain", "小雨"),
    ("heavy rain", "大雨"), ("thunderstorms", "雷阵雨"), ("snow", "雪"), ("fog", "雾"), ("windy", "大风"),
]

MODELS = ["gpt-4o-2024-08-06", "gpt-4o-mini", "claude-3-5-sonnet-20241022", "qwen2.5-72b-instruct",
          "deepseek-chat", "llama-3.1-70b-instruct", "glm-4-plus", "mistral-large-2411"]


@dataclass(frozen=True)
class Person:
    en: str
    zh: str
    email: str


class Lexicon:
    """Draws entities from one seeded RNG; ``lang`` picks the surface form."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.lang = lang
        self.base_date = date(2024, 1, 1) + timedelta(days=rng.randrange(0, 900))

    def pick(self, seq: list[str] | tuple[str, ...]) -> str:
        return self.rng.choice(list(seq))

    def person(self) -> Person:
        r = self.rng
        first, last = r.choice(FIRST_EN), r.choice(LAST_EN)
        zh = r.choice(SURNAME_ZH) + r.choice(GIVEN_ZH)
        dom = r.choice(["example.com", "mail.example.org", "corp.example.net"])
        return Person(f"{first} {last}", zh, f"{first.lower()}.{last.lower()}@{dom}")

    def name(self, p: Person) -> str:
        return p.zh if self.lang == "zh" else p.en

    def city(self) -> tuple[str, str, str, str]:
        return self.rng.choice(CITIES)

    def cname(self, c: tuple[str, str, str, str]) -> str:
        return c[1] if self.lang == "zh" else c[0]

    def pair(self, p: tuple[str, str]) -> str:
        return p[1] if self.lang == "zh" else p[0]

    def day(self, lo: int = 1, hi: int = 60) -> date:
        return self.base_date + timedelta(days=self.rng.randrange(lo, hi))

    def fdate(self, d: date) -> str:
        if self.lang == "zh":
            return f"{d.year}年{d.month}月{d.day}日"
        return d.strftime(self.rng.choice(["%B %d, %Y", "%d %B %Y", "%b %d"])).replace(" 0", " ")

    def ident(self, prefix: str, n: int = 6, digits: bool = True) -> str:
        chars = string.digits if digits else string.ascii_uppercase + string.digits
        return prefix + "".join(self.rng.choice(chars) for _ in range(n))

    def money(self, lo: float, hi: float) -> float:
        return round(self.rng.uniform(lo, hi), 2)

    def cur(self) -> str:
        return "CNY" if self.lang == "zh" and self.rng.random() < 0.7 else self.rng.choice(["USD", "EUR", "USD"])

    def fmoney(self, amount: float, cur: str) -> str:
        sym = {"USD": "$", "EUR": "€", "CNY": "¥"}.get(cur, "")
        if self.lang == "zh":
            return f"{amount:.2f}元" if cur == "CNY" else f"{sym}{amount:,.2f}"
        return f"{sym}{amount:,.2f}"

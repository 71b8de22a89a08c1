# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_rate.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_rate.svg'
set termoption noenhanced
set title 'Saves: rate offered and absorbed against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
$d0 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.71407
EOD
$d1 << EOD
1.17938 1.18753
1.47422 1.4379
1.62164 1.52726
1.76907 1.51817
2.35876 1.55212
4.71751 1.62674
EOD
$d2 << EOD
1.17938 2.01987
4.71751 2.01987
EOD
$d3 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.7068
EOD
$d4 << EOD
1.17938 1.19955
1.47422 1.4453
1.62164 1.51402
1.76907 1.56994
2.35876 1.6043
4.71751 1.52047
EOD
$d5 << EOD
1.17938 1.69057
4.71751 1.69057
EOD
$d6 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.6789
EOD
$d7 << EOD
1.17938 1.19283
1.47422 1.42283
1.62164 1.4405
1.76907 1.45725
2.35876 1.50236
4.71751 1.37985
EOD
$d8 << EOD
1.17938 1.93901
4.71751 1.93901
EOD
$d9 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.5788
EOD
$d10 << EOD
1.17938 1.17861
1.47422 1.36871
1.62164 1.51625
1.76907 1.51395
2.35876 1.40389
4.71751 1.32182
EOD
$d11 << EOD
1.17938 2.13524
4.71751 2.13524
EOD
$d12 << EOD
1.17938 1.17938
1.76907 1.76907
1.91649 1.91649
2.06391 2.06391
2.35876 2.35876
4.71751 4.71108
EOD
$d13 << EOD
1.17938 1.20517
1.76907 1.75871
1.91649 1.7352
2.06391 1.79597
2.35876 1.77332
4.71751 1.65543
EOD
$d14 << EOD
1.17938 1.54474
4.71751 1.54474
EOD
$d15 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.71751
EOD
$d16 << EOD
1.17938 1.18406
1.47422 1.47429
1.62164 1.59358
1.76907 1.4131
2.35876 1.41266
4.71751 1.56845
EOD
$d17 << EOD
1.17938 1.89757
4.71751 1.89757
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-after-1202.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-after-1202.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-after-1202.json)', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-after.json)', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-after.json)', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-after.json)', \
     $d6 using 1:2 with linespoints lw 2 pt 7 lc 7 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-before-1201.json)', \
     $d7 using 1:2 with linespoints lw 2 pt 7 lc 8 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-before-1201.json)', \
     $d8 using 1:2 with linespoints lw 2 pt 7 lc 9 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-before-1201.json)', \
     $d9 using 1:2 with linespoints lw 2 pt 7 lc 10 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-before.json)', \
     $d10 using 1:2 with linespoints lw 2 pt 7 lc 11 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-before.json)', \
     $d11 using 1:2 with linespoints lw 2 pt 7 lc 12 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-before.json)', \
     $d12 using 1:2 with linespoints lw 2 pt 7 lc 13 dt 1 title 'offered: fs:///work/benchdir-save, llama-3.1-8b (save-fs-after.json)', \
     $d13 using 1:2 with linespoints lw 2 pt 7 lc 14 dt 1 title 'absorbed: fs:///work/benchdir-save, llama-3.1-8b (save-fs-after.json)', \
     $d14 using 1:2 with linespoints lw 2 pt 7 lc 15 dt 2 title 'fio O_DIRECT write, same disk: fs:///work/benchdir-save, llama-3.1-8b (save-fs-after.json)', \
     $d15 using 1:2 with linespoints lw 2 pt 7 lc 16 dt 1 title 'offered: fs:///work/benchdir-save, llama-3.1-8b (save-fs-before.json)', \
     $d16 using 1:2 with linespoints lw 2 pt 7 lc 17 dt 1 title 'absorbed: fs:///work/benchdir-save, llama-3.1-8b (save-fs-before.json)', \
     $d17 using 1:2 with linespoints lw 2 pt 7 lc 18 dt 2 title 'fio O_DIRECT write, same disk: fs:///work/benchdir-save, llama-3.1-8b (save-fs-before.json)'
